from django.urls import path

from trails.views import evaluation, overview, purge, recalls, releases, trails

app_name = "ops"
urlpatterns = [
    path("", overview.index, name="index"),
    path("<slug:scope>/", overview.overview, name="overview"),
    path("<slug:scope>/thresholds/", overview.threshold_action, name="thresholds"),
    path("<slug:scope>/tuning/", overview.tuning, name="tuning"),
    path("<slug:scope>/trails/", trails.trail_list, name="trails"),
    path("<slug:scope>/trails/vote/", trails.trail_bulk_vote, name="bulk-vote"),
    path("<slug:scope>/trails/<uuid:trail_id>/", trails.trail_detail, name="trail"),
    path("<slug:scope>/trails/<uuid:trail_id>/vote/", trails.trail_vote, name="vote"),
    path("<slug:scope>/replay/", recalls.replay, name="replay"),
    path("<slug:scope>/recalls/", recalls.recall_log, name="recalls"),
    path("<slug:scope>/recalls/<uuid:recall_id>/", recalls.recall_detail, name="recall"),
    path("<slug:scope>/find/", recalls.find, name="find"),
    path("<slug:scope>/changes/", releases.changes, name="changes"),
    path("<slug:scope>/purge/", purge.purge, name="purge"),
    path("<slug:scope>/purge/<uuid:run_id>/", purge.purge_progress, name="purge-progress"),
]
# Two segments, so no scope slug can shadow them.
urlpatterns = [
    path("evaluation/reports/", evaluation.reports, name="reports"),
    path("evaluation/reports/<str:name>/", evaluation.report_html, name="report"),
    *urlpatterns,
]
