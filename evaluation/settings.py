"""The service's settings plus the benchmark's floors (evaluation/urls.py): what
`benchmark_http` runs gunicorn with (DJANGO_SETTINGS_MODULE=evaluation.settings), never
production."""
from ragtrail_site.settings import *  # noqa: F403 -- the service as deployed, and only this added
from ragtrail_site.settings import RAGTRAIL_RECALL_BUDGET_PATHS

ROOT_URLCONF = "evaluation.urls"
# The floors stand in for recall, so they are shed by recall's budget: under the API's
# longer one the model alone was never shed where recall was, and the ratio measured the budgets.
RAGTRAIL_RECALL_BUDGET_PATHS = [*RAGTRAIL_RECALL_BUDGET_PATHS, r"^/api/v1/bench/"]
