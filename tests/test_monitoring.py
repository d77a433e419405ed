"""Observability as operators run it (issue 27): /metrics in the Prometheus format, protected;
alert rules checked by promtool; a real Prometheus scraping gunicorn's several workers and
seeing every recall; one JSON access line per request, without the question."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from scopes.models import ApiKey, Scope, Section
from tests.conftest import service_env
from tests.test_production import call, free_port, stop, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "ragtrail_site" / "monitoring"
TOKEN = "metrics-test-token-0123456789"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's prometheus package")
        pytest.skip(f"no {name} here (Debian's prometheus package; CI installs it)")
    return found


def test_metrics_are_off_unless_configured_and_need_the_token(client, db):
    assert client.get("/metrics").status_code == 404
    with override_settings(RAGTRAIL_METRICS_TOKEN=TOKEN, RAGTRAIL_METRICS_ALLOW=[]):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
        assert b"ragtrail_recalls_total" in answer.content


def test_an_allowed_network_scrapes_without_a_token(client, db):
    import ipaddress

    with override_settings(RAGTRAIL_METRICS_TOKEN="", RAGTRAIL_METRICS_ALLOW=[ipaddress.ip_network("10.0.0.0/8")]):
        assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
        assert client.get("/metrics", REMOTE_ADDR="192.168.1.1").status_code == 401


def counter(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_recall_moves_its_counters_and_every_alert_and_panel_names_an_exported_metric(api, sections, client):
    with override_settings(RAGTRAIL_METRICS_TOKEN=TOKEN):
        before = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()
        api.record("hospital", query="Where do visitors park?", cited=["parking"], signal="accepted")
        assert api.recall("hospital", query="Where do visitors park?").json()["outcome"] == "prefetch"
        after = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()
    assert (
        counter(after, "ragtrail_recalls_total", outcome="prefetch")
        == counter(before, "ragtrail_recalls_total", outcome="prefetch") + 1
    )
    assert counter(after, "ragtrail_records_total", signal="accepted", status="active") >= 1
    recall_route = counter(after, "ragtrail_http_requests_total", route="api/v1/scopes/<scope>/recall", status="200")
    assert recall_route >= 1
    exported = set(re.findall(r"^# TYPE (\w+) (\w+)", after, flags=re.M))
    names = {name for name, _ in exported} | {f"{name}_bucket" for name, kind in exported if kind == "histogram"}
    names |= {f"{name}_total" for name, kind in exported if kind == "counter"}
    used = set(
        re.findall(
            r"\b(ragtrail_\w+)",
            (MONITORING / "alerts.yml").read_text() + (MONITORING / "grafana-dashboard.json").read_text(),
        )
    )
    assert used and used <= names, f"alerts or panels name metrics nobody exports: {sorted(used - names)}"
    assert "Where do visitors park" not in after


def test_the_alert_rules_pass_promtool():
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(MONITORING / "alerts.yml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout


def test_every_alert_fires_on_its_cause_and_not_on_a_look_alike():
    """promtool's unit tests of the rules (synthetic series): deliberate 503s are no server
    errors, shedding for capacity warns without paging, the database away pages and names
    PostgreSQL; each alert's words (its runbook line) are pinned."""
    import yaml

    done = subprocess.run(
        [tool("promtool"), "test", "rules", "alerts-tests.yml"], capture_output=True, text=True, cwd=MONITORING
    )
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {r["alert"] for g in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load((MONITORING / "alerts-tests.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case.get("exp_alerts")}
    assert fired == alerts, f"alerts no unit test sees fire: {sorted(alerts - fired)}"


def test_the_dashboard_is_grafana_json_with_a_panel_per_concern():
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    titles = [panel["title"] for panel in board["panels"]]
    assert len(titles) == len(set(titles)) >= 12 and all(panel["targets"] for panel in board["panels"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_real_prometheus_scrapes_gunicorns_workers_and_sees_every_recall(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("production runs on PostgreSQL (as CI does)")
    prometheus = tool("prometheus")
    scope = Scope.objects.create(slug="watched", matcher="lexical")
    Section.upsert(scope, {"parking": "Visitors park in car park B."})
    _, key = ApiKey.issue([scope])
    port, prometheus_port = free_port(), free_port()
    env = {k: v for k, v in service_env().items() if not k.startswith("PROMETHEUS_")}
    env.update(
        RAGTRAIL_SECRET_KEY=settings.SECRET_KEY,
        RAGTRAIL_BIND=f"127.0.0.1:{port}",
        RAGTRAIL_WORKERS="2",
        RAGTRAIL_EMBEDDER="trails.embedders.hashing",
        RAGTRAIL_METRICS_TOKEN=TOKEN,
        RAGTRAIL_METRICS_DIR=str(tmp_path / "metrics"),
        RAGTRAIL_LOG_FORMAT="json",
    )
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{MONITORING / 'alerts.yml'}']\n"
        "scrape_configs:\n"
        "  - job_name: ragtrail\n"
        f"    authorization: {{credentials_file: '{tmp_path / 'token'}'}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "ragtrail_site/gunicorn_conf.py", "ragtrail_site.wsgi"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    scraper = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port)
        recalls = 40
        for n in range(recalls):
            status, _, _ = call(
                base, "POST", "/api/v1/scopes/watched/recall", key, {"query": f"Where do visitors park {n}?"}
            )
            assert status == 200
        seen = None
        query = urllib.parse.quote('sum(ragtrail_recalls_total{job="ragtrail"})')
        for _ in range(60):
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{prometheus_port}/api/v1/query?query={query}", timeout=5
                ) as answer:
                    result = json.load(answer)["data"]["result"]
                seen = float(result[0]["value"][1]) if result else None
            except OSError:
                seen = None
            if seen == recalls:
                break
            time.sleep(1)
        # Both workers answered recalls; the one scrape adds them all up (multiprocess mode).
        assert seen == recalls, f"Prometheus saw {seen} recalls of {recalls}"
    finally:
        stop(web, scraper)
    log = web.stdout.read()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"ragtrail.access"' in line]
    recall_lines = [line for line in lines if line.get("route") == "api/v1/scopes/<scope>/recall"]
    assert len(recall_lines) == recalls, log[-2000:]
    assert {(line["method"], line["status"], line["scope"], line["outcome"]) for line in recall_lines} == {
        ("POST", 200, "watched", "miss")
    }
    assert all(isinstance(line["duration_ms"], float) for line in recall_lines)
    assert "visitors park" not in log and "Where do" not in log  # never the question


def test_metrics_off_makes_every_metric_a_no_op():
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'ragtrail_site.settings'); django.setup(); "
        "from infra import metrics; "
        "assert all(isinstance(getattr(metrics, n), metrics._Off) for n in ('RECALLS', 'HTTP_SECONDS', 'TASK_LAST_SUCCESS')); "
        "metrics.RECALLS.labels('prefetch', 'lexical').inc(); metrics.HTTP_SECONDS.labels('r').observe(1.0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "RAGTRAIL_METRICS": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_made_up_http_methods_add_no_metric_series(client, db):
    from infra import metrics

    def series() -> set:
        return {
            tuple(sorted(s.labels.items()))
            for family in metrics.registry().collect()
            for s in family.samples
            if s.name == "ragtrail_http_requests_total"
        }

    before = series()
    for n in range(20):
        client.generic(f"MADEUP{n}", "/api/v1/scopes")
    added = series() - before
    assert {dict(labels)["method"] for labels in added} <= {"other"} and len(added) <= 1


def test_a_web_restart_keeps_the_metric_files_of_live_processes(tmp_path):
    """The worker's files (its jobs' last successes) survive gunicorn starting again; a dead
    process's are removed."""
    live, dead = tmp_path / f"gauge_mostrecent_{os.getpid()}.db", tmp_path / "counter_4194000.db"
    live.write_bytes(b"x")
    dead.write_bytes(b"x")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", "import runpy; runpy.run_path('ragtrail_site/gunicorn_conf.py')"],
        cwd=ROOT,
        env={**env, "RAGTRAIL_METRICS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert live.exists() and not dead.exists()


def test_every_flag_the_overview_shows_has_an_alert(db):
    import yaml

    from infra import metrics
    from trails.core.calibration import FLAG_KINDS
    from trails.tasks import roll_up_task

    for n, kind in enumerate(FLAG_KINDS):
        Scope.objects.create(
            slug=f"flagged-{kind}",
            matcher="lexical",
            threshold_flags=f"lexical:{kind}" + (":key:abc" if kind == "reporter" else ""),
        )
    roll_up_task.run()
    for kind in FLAG_KINDS:
        assert metrics.SCOPES_FLAGGED.labels(kind)._value.get() == 1, kind
    rules = yaml.safe_load((ROOT / "ragtrail_site" / "monitoring" / "alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert any("ragtrail_scopes_flagged" in expr and "flag" in expr for expr in exprs)
