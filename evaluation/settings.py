"""The lab: the service's settings plus the evaluation app (its commands: evaluate, the
benchmarks) and the benchmark's floors (evaluation/urls.py). `make bench` and `benchmark_http`'s
gunicorn run with DJANGO_SETTINGS_MODULE=evaluation.settings; production never does."""

from ragtrail_site.settings import *  # noqa: F403 -- the service as deployed, and only this added
from ragtrail_site.settings import INSTALLED_APPS, RAGTRAIL_RECALL_BUDGET_PATHS

# Before the site's own config, which stays last (its ready() wires the apps above it).
INSTALLED_APPS = [*INSTALLED_APPS[:-1], "evaluation", INSTALLED_APPS[-1]]

ROOT_URLCONF = "evaluation.urls"
# The floors stand in for recall, so they are shed by recall's budget: under the API's
# longer one the model alone was never shed where recall was, and the ratio measured the budgets.
RAGTRAIL_RECALL_BUDGET_PATHS = [*RAGTRAIL_RECALL_BUDGET_PATHS, r"^/api/v1/bench/"]
