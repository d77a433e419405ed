"""Recall through the documented deployment (nginx with deploy/nginx/ragtrail.conf in front of
gunicorn on a unix socket) with slow, trickling and lying clients beside the load, against the
same load without them, in alternating rounds of one run; with --without-proxy, the same pair
against gunicorn alone on a TCP port (what the recipe bound before nginx was part of it)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from evaluation import deployment, gunicorn
from evaluation.bulk import drop_scope
from evaluation.loadgen import Connection, Request, Result, closed_loop
from evaluation.timing import percentile, save_figures
from scopes.models import ApiKey, Scope, Section

QUESTION = "Where do visitors park?"


def summary(results: list[Result], seconds: float) -> dict:
    """Answers and 503s by their own p50/p99 (ms), failures (no answer), and the rate."""
    answered = [r.latency_ms for r in results if r.status == 200]
    shed = [r.latency_ms for r in results if r.status == 503]
    return {
        "requests": len(results),
        "per_s": round(len(results) / seconds, 1),
        "answered": len(answered),
        "shed": len(shed),
        "failed": sum(1 for r in results if r.status not in (200, 503)),
        "recall_p50_ms": round(percentile(answered, 0.5), 1) if answered else None,
        "recall_p99_ms": round(percentile(answered, 0.99), 1) if answered else None,
        "shed_p99_ms": round(percentile(shed, 0.99), 1) if shed else None,
        "all_p99_ms": round(percentile([r.latency_ms for r in results], 0.99), 1) if results else None,
    }


class Command(BaseCommand):
    help = "Prints recall p99 and shed p99 with slow clients beside the load against the same load without them, through nginx."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
        parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (quiet, then under slow clients)")
        parser.add_argument("--clients", type=int, default=16, help="recall clients, back to back")
        parser.add_argument(
            "--hostile", type=int, default=8, help="hostile clients of each kind, keyless and keyed each"
        )
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument(
            "--without-proxy", action="store_true", help="also the same pair against gunicorn alone on a TCP port"
        )
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")

    def handle(self, *args, seconds, rounds, clients, hostile, workers, without_proxy, json_path, **options) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("the deployment benchmark runs on PostgreSQL: set DATABASE_URL")
        if not deployment.nginx_available():
            raise CommandError("nginx is not installed (apt-get install nginx)")
        for name, value in (("--seconds", seconds), ("--rounds", rounds), ("--clients", clients)):
            if value < 1:
                raise CommandError(f"{name} must be at least 1, not {value}")
        scope = Scope.objects.create(slug=f"bench-deploy-{uuid.uuid4().hex[:8]}", matcher="lexical")
        _, key = ApiKey.issue([scope], name="bench")
        Section.objects.create(scope=scope, section_id="parking", text="Car park B, level 2.")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "evaluation.settings"),
            "RAGTRAIL_SECRET_KEY": settings.SECRET_KEY,
            "RAGTRAIL_MAX_REQUESTS": "0",
        }
        path = f"/api/v1/scopes/{scope.slug}/recall"
        figures: dict = {"clients": clients, "hostile_clients": hostile * 6, "workers": workers, "seconds": seconds}
        try:
            with tempfile.TemporaryDirectory(prefix="bench-deploy-") as folder:
                with deployment.deployed(Path(folder), env, workers) as running, deployment.through_proxy(running):
                    status = deployment.post(
                        running,
                        f"/api/v1/scopes/{scope.slug}/trails",
                        key,
                        {"query": QUESTION, "cited": ["parking"], "signal": "accepted"},
                    )
                    if status != 201:
                        raise CommandError(f"recording the benchmark's trail answered {status}")
                    figures["through nginx"] = self._pairs(
                        deployment.Target.of(running), running.https_port, path, key, seconds, rounds, clients, hostile
                    )
            if without_proxy:
                with gunicorn.running(workers, {**env, "RAGTRAIL_TRUSTED_PROXIES": ""}) as (port, _):
                    saved = Connection.proxy_stamp
                    Connection.proxy_stamp = False  # a client talking to gunicorn alone stamps nothing
                    try:
                        figures["gunicorn alone"] = self._pairs(
                            deployment.Target(port), port, path, key, seconds, rounds, clients, hostile
                        )
                    finally:
                        Connection.proxy_stamp = saved
        finally:
            drop_scope(scope)
        self._print(figures)
        save_figures(json_path, figures)

    def _pairs(self, target, port, path, key, seconds, rounds, clients, hostile) -> dict:
        recall = Request("POST", path, {"query": QUESTION})
        headers = {"Authorization": f"Bearer {key}"}
        found: dict[str, list[Result]] = {"quiet": [], "slow clients": []}
        # Unmeasured: connections opened, every worker's first requests served.
        asyncio.run(closed_loop("127.0.0.1", port, headers, lambda n: recall, clients, 3.0))
        for _ in range(rounds):
            for phase in found:
                self.stdout.write(f"  {phase}, {seconds:.0f} s ...")
                if phase == "quiet":
                    run = asyncio.run(closed_loop("127.0.0.1", port, headers, lambda n: recall, clients, seconds))
                else:
                    with deployment.attackers(target, path, key, each=hostile):
                        run = asyncio.run(closed_loop("127.0.0.1", port, headers, lambda n: recall, clients, seconds))
                found[phase] += run
        return {phase: summary(results, seconds * rounds) for phase, results in found.items()}

    def _print(self, figures: dict) -> None:
        self.stdout.write(
            f"\n{figures['clients']} recall clients, {figures['hostile_clients']} hostile ones (slow headers, slow "
            f"bodies, lying lengths; half keyless, half keyed), {figures['workers']} gunicorn workers"
        )
        header = f"{'':16} {'phase':13} {'req/s':>7} {'200':>6} {'503':>6} {'failed':>6} {'recall p50':>10} {'recall p99':>10} {'shed p99':>9}"
        self.stdout.write(header)
        for where in ("through nginx", "gunicorn alone"):
            for phase, row in figures.get(where, {}).items():
                ms = lambda v: "-" if v is None else f"{v:.0f} ms"  # noqa: E731
                self.stdout.write(
                    f"{where:16} {phase:13} {row['per_s']:>7} {row['answered']:>6} {row['shed']:>6} {row['failed']:>6} "
                    f"{ms(row['recall_p50_ms']):>10} {ms(row['recall_p99_ms']):>10} {ms(row['shed_p99_ms']):>9}"
                )
            pair = figures.get(where)
            if pair and pair["quiet"]["recall_p99_ms"] and pair["slow clients"]["recall_p99_ms"]:
                self.stdout.write(
                    f"{where}: recall p99 with slow clients / without: "
                    f"{pair['slow clients']['recall_p99_ms'] / pair['quiet']['recall_p99_ms']:.2f}x"
                )
