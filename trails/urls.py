from django.urls import path

from trails import views

app_name = "ops"
urlpatterns = [
    path("", views.index, name="index"),
    path("<slug:scope>/", views.overview, name="overview"),
    path("<slug:scope>/thresholds/", views.threshold_action, name="thresholds"),
    path("<slug:scope>/trails/", views.trail_list, name="trails"),
    path("<slug:scope>/trails/vote/", views.trail_bulk_vote, name="bulk-vote"),
    path("<slug:scope>/trails/<uuid:trail_id>/", views.trail_detail, name="trail"),
    path("<slug:scope>/trails/<uuid:trail_id>/vote/", views.trail_vote, name="vote"),
    path("<slug:scope>/replay/", views.replay, name="replay"),
    path("<slug:scope>/recalls/", views.recall_log, name="recalls"),
    path("<slug:scope>/purge/", views.purge, name="purge"),
    path("<slug:scope>/purge/<uuid:run_id>/", views.purge_progress, name="purge-progress"),
]
# Two segments, so no scope slug can shadow them.
urlpatterns = [
    path("evaluation/reports/", views.reports, name="reports"),
    path("evaluation/reports/<str:name>/", views.report_html, name="report"),
    *urlpatterns,
]
