"""The floors benchmark_http measures recall against exist only where it asks for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parents[1]


def test_the_service_has_no_benchmark_endpoints():
    for path in ("/api/v1/bench/s/trivial", "/api/v1/bench/s/embed"):
        try:
            match = resolve(path)
        except Resolver404:
            continue
        raise AssertionError(f"{path} resolves to {match.url_name} in the service's URLs")


def test_the_benchmark_url_conf_adds_the_floors_beside_recall():
    script = (
        "import django; django.setup(); from django.urls import resolve; "
        "print(resolve('/api/v1/bench/s/trivial').url_name, resolve('/api/v1/bench/s/embed').url_name, "
        "resolve('/api/v1/scopes/s/recall').url_name)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "evaluation.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trivial", "embed_only", "recall_endpoint"]


def test_the_floors_are_shed_by_recalls_budget_not_the_apis_longer_one(settings):
    # Under the API's 2 s budget the model alone was never shed where recall (0.5 s) was,
    # and benchmark_http's ratio compared the budgets, not the work.
    from infra.load_shedding import budget_for

    settings.RAGTRAIL_RECALL_BUDGET_MS, settings.RAGTRAIL_API_BUDGET_MS = 500, 2000
    recall = budget_for("/api/v1/scopes/s/recall")
    assert recall == 0.5 and budget_for("/api/v1/scopes/s/trails") == 2.0
    # The service knows no benchmark path; the benchmark's settings add its floors to recall's budget.
    assert budget_for("/api/v1/bench/s/trivial") == 2.0
    from evaluation import settings as bench_settings

    settings.RAGTRAIL_RECALL_BUDGET_PATHS = bench_settings.RAGTRAIL_RECALL_BUDGET_PATHS
    assert budget_for("/api/v1/bench/s/trivial") == recall and budget_for("/api/v1/bench/s/embed") == recall
