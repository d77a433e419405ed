"""What the tests run with: the service's settings and URLs as deployed, plus the evaluation
app (its commands and modules are tested; production does not install it).

Two copies of the suite may run at once on one machine: each run has its own id
(RAGTRAIL_TEST_RUN, the process id unless set), and with it its own test database, cache key
prefix and job queue. The processes a test starts inherit the id, and so the same ones.
"""

import os

from evaluation.settings import *  # noqa: F403 -- the lab: the service plus the evaluation app
from evaluation.settings import CACHES, DATABASES
from ragtrail_site.settings import RAGTRAIL_RECALL_BUDGET_PATHS, ROOT_URLCONF  # noqa: F401 -- not the lab's floors

RUN = os.environ.setdefault("RAGTRAIL_TEST_RUN", str(os.getpid()))
os.environ.setdefault("RAGTRAIL_CACHE_PREFIX", f"ragtrail-test-{RUN}")
os.environ.setdefault("RAGTRAIL_JOB_QUEUE", f"ragtrail-test-{RUN}")
for _cache in CACHES.values():
    if "KEY_PREFIX" in _cache:
        _cache["KEY_PREFIX"] = os.environ["RAGTRAIL_CACHE_PREFIX"]
    if _cache["BACKEND"] == "django.core.cache.backends.redis.RedisCache":
        _cache["BACKEND"] = "tests.cache.RunsOwnRedisCache"  # a test's clear() empties this run's keys only
CELERY_TASK_DEFAULT_QUEUE = os.environ["RAGTRAIL_JOB_QUEUE"]
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{RUN}"}

# Every test runs with the one writer enforced: a write around it fails the test.
RAGTRAIL_ENFORCE_ONE_WRITER = True
