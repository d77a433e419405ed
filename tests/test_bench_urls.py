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
    script = ("import django; django.setup(); from django.urls import resolve; "
              "print(resolve('/api/v1/bench/s/trivial').url_name, resolve('/api/v1/bench/s/embed').url_name, "
              "resolve('/api/v1/scopes/s/recall').url_name)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ragtrail_site.settings", "RAGTRAIL_URLCONF": "ragtrail_site.bench_urls"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trivial", "embed_only", "recall_endpoint"]
