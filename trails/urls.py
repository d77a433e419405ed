from django.urls import path

from trails.views import audit, evaluation, overview, purge, recalls, syncs, trails

app_name = "ops"
urlpatterns = [
    path("", overview.index, name="index"),
    path("<slug:scope_slug>/", overview.overview, name="overview"),
    path("<slug:scope_slug>/thresholds/", overview.threshold_action, name="thresholds"),
    path("<slug:scope_slug>/tuning/", overview.tuning, name="tuning"),
    path("<slug:scope_slug>/second-chance/", overview.second_chance_switch, name="second-chance"),
    path("<slug:scope_slug>/trails/", trails.trail_list, name="trails"),
    path("<slug:scope_slug>/trails/vote/", trails.trail_bulk_vote, name="bulk-vote"),
    path("<slug:scope_slug>/trails/<uuid:trail_id>/", trails.trail_detail, name="trail"),
    path("<slug:scope_slug>/trails/<uuid:trail_id>/vote/", trails.trail_vote, name="vote"),
    path("<slug:scope_slug>/replay/", recalls.replay, name="replay"),
    path("<slug:scope_slug>/recalls/", recalls.recall_log, name="recalls"),
    path("<slug:scope_slug>/recalls/<uuid:recall_id>/", recalls.recall_detail, name="recall"),
    path("<slug:scope_slug>/find/", recalls.find, name="find"),
    path("<slug:scope_slug>/syncs/", syncs.syncs, name="syncs"),
    path("<slug:scope_slug>/audit/", audit.audit, name="audit"),
    path("<slug:scope_slug>/keys/<int:key_id>/suspend/", audit.suspend_key, name="suspend-key"),
    path("<slug:scope_slug>/keys/<int:key_id>/restore/", audit.restore_key, name="restore-key"),
    path("<slug:scope_slug>/keys/<int:key_id>/set-aside/", audit.set_aside_key, name="set-aside-key"),
    path("<slug:scope_slug>/keys/<int:key_id>/seen/", audit.acknowledge_key_moved, name="key-moved-seen"),
    path("<slug:scope_slug>/purge/", purge.purge, name="purge"),
    path("<slug:scope_slug>/purge/<uuid:run_id>/", purge.purge_progress, name="purge-progress"),
]
# Two segments, so no scope slug can shadow them.
urlpatterns = [
    path("evaluation/reports/", evaluation.reports, name="reports"),
    path("evaluation/reports/<str:name>/", evaluation.report_html, name="report"),
    *urlpatterns,
]
