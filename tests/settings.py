"""What the tests run with: the service's settings and URLs as deployed, plus the evaluation
app (its commands and modules are tested; production does not install it)."""

from evaluation.settings import *  # noqa: F403 -- the lab: the service plus the evaluation app
from ragtrail_site.settings import RAGTRAIL_RECALL_BUDGET_PATHS, ROOT_URLCONF  # noqa: F401 -- not the lab's floors
