"""Recall on a store as it is against the same store with its trails and band keys
hash-partitioned by scope, question by question in one process (evaluation.partitioned)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from evaluation import phases, results
from evaluation.partitioned import (
    SCHEMA,
    as_default,
    connection_reading,
    copy_partitioned,
    drop_partitioned,
    partitioned_bytes,
)
from evaluation.scale import ScaleWorkload, database_label
from evaluation.timing import WARM_UP, save_figures
from scopes.models import Scope
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.models import Trail
from trails.serving.recall import recall


class Command(BaseCommand):
    help = (
        "Copies the store's trails and band keys into tables hash-partitioned by scope, then times recall on "
        "one scope through both, alternating question by question; prints both, their ratio and whether the answers agree."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--scope", required=True, metavar="SLUG", help="the scope recall is timed on (a kept benchmark_scale scope)"
        )
        parser.add_argument("--partitions", type=int, default=16)
        parser.add_argument("--recalls", type=int, default=2000, help="questions timed on each side")
        parser.add_argument("--seed", type=int, default=7, help="the seed benchmark_scale filled the scope with")
        parser.add_argument(
            "--no-warm-pass",
            dest="warm",
            action="store_false",
            help="time the first pass (by default every question is asked once on both sides untimed first)",
        )
        parser.add_argument(
            "--reuse-copy", action="store_true", help="time against the partitioned copy an earlier run kept"
        )
        parser.add_argument("--keep-copy", action="store_true", help="keep the partitioned copy afterwards")
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")
        parser.add_argument("--record", action="store_true", help="keep the figure in docs/benchmark-results.json")

    def handle(
        self,
        *args,
        scope: str,
        partitions: int,
        recalls: int,
        seed: int,
        reuse_copy: bool,
        keep_copy: bool,
        json_path: Path | None,
        record: bool,
        warm: bool = True,
        **options,
    ) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("partitioning is PostgreSQL's: point DATABASE_URL at PostgreSQL")
        if not 2 <= partitions <= 256:
            raise CommandError("--partitions must be between 2 and 256")
        timed = Scope.objects.filter(slug=scope).first()
        if timed is None:
            raise CommandError(f"no scope {scope!r}: keep one with benchmark_scale --keep")
        store = Trail.objects.count()
        started = time.perf_counter()
        copy_spent = {}
        if not reuse_copy:
            self.stdout.write(
                f"copying {store:,} trails and their band keys into {partitions} hash partitions by scope"
            )
            copy_spent = copy_partitioned(partitions, self.stdout.write)
            self.stdout.write(f"copied in {time.perf_counter() - started:.0f} s")
        try:
            figures = self._interleaved(timed, recalls, seed, warm)
        finally:
            if not keep_copy:
                drop_partitioned()
        figures.update(
            store_trails=store,
            scope_trails=Trail.objects.filter(scope=timed).count(),
            partitions=partitions,
            database=database_label(),
            copy_s={k: round(v, 1) for k, v in copy_spent.items()},
        )
        if keep_copy:
            figures["bytes"] = partitioned_bytes()
        self.stdout.write(
            f"{figures['database']}: {store:,} trails, recall on a scope of {figures['scope_trails']:,}, {figures['of']} questions on each: "
            f"unpartitioned p50 {figures['unpartitioned']['p50_ms']:.2f} / p99 {figures['unpartitioned']['p99_ms']:.2f} ms; "
            f"{partitions} partitions p50 {figures['partitioned']['p50_ms']:.2f} / p99 {figures['partitioned']['p99_ms']:.2f} ms; "
            f"ratio (partitioned / unpartitioned) p50 {figures['p50_ratio']}x, p99 {figures['p99_ratio']}x; "
            f"the same answer to {figures['same_answers']} of {figures['of']}"
        )
        self.stdout.write(
            "  mean ms a recall by phase (unpartitioned / partitioned): "
            + ", ".join(
                f"{p} {figures['unpartitioned']['phases_mean_ms'][p]:.2f} / {figures['partitioned']['phases_mean_ms'][p]:.2f}"
                for p in phases.PHASES
            )
        )
        if record:
            label = results.SIZE_LABELS.get(store, f"{store:,}")
            results.record(
                f"partitioned-{label}",
                say=self.stdout.write,
                target=f"recall at {store:,} trails with trails and band keys hash-partitioned by scope "
                f"({partitions} partitions) against unpartitioned, interleaved, the same answers",
                command=f"`benchmark_partitioned --scope SLUG --partitions {partitions} --record` on a store `benchmark_scale --keep` filled "
                f"({figures['of']:,} questions a side, alternating, after an untimed pass over them on both)",
                measured=f"{figures['database']}: partitioned p50 {figures['partitioned']['p50_ms']:.2f} against "
                f"{figures['unpartitioned']['p50_ms']:.2f} ms, **{figures['p50_ratio']}x**; p99 "
                f"{figures['partitioned']['p99_ms']:.2f} against {figures['unpartitioned']['p99_ms']:.2f} ms, "
                f"**{figures['p99_ratio']}x**; the same answer to {figures['same_answers']} of {figures['of']} questions",
                met=figures["same_answers"] == figures["of"]
                and figures["p50_ratio"] <= 1.5
                and figures["p99_ratio"] <= 1.5,
            )
        save_figures(json_path, figures)

    def _interleaved(self, scope: Scope, recalls: int, seed: int, warm: bool = True) -> dict:
        embedder = get_embedder()
        asked = ScaleWorkload(embedder, seed).asked(recalls + WARM_UP)
        sides = {"unpartitioned": connection_reading("public"), "partitioned": connection_reading(SCHEMA)}

        def asking(wrapper):
            def ask(question):
                with as_default(wrapper):
                    result = recall(scope, question.text)
                return result.trail.id if result.outcome.value != "miss" else None

            return ask

        try:
            with (
                serving(PrecomputedEmbedder(embedder, [a.text for a in asked], np.stack([a.vector for a in asked]))),
                phases.timing() as clock,
            ):
                # A first pass over every question on both sides, not timed: a scope's pages of a ten-million-trail
                # store are not in memory after a fill or a copy (the first pass read from disk, ~90 ms a recall on both).
                spent, answers = phases.alternately(
                    {name: asking(wrapper) for name, wrapper in sides.items()},
                    [*asked, *asked] if warm else asked,
                    clock,
                    untimed=len(asked) if warm else WARM_UP,
                )
        finally:
            for wrapper in sides.values():
                wrapper.close()
        row = phases.side_by_side(spent, clock, over="partitioned", under="unpartitioned")
        row["same_answers"] = sum(a == b for a, b in zip(answers["unpartitioned"], answers["partitioned"]))
        row["of"] = len(answers["partitioned"])
        return row
