"""`make bench`: the scale and HTTP benchmarks in one run, compared with the previous run."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

# (figure, path into the results, True where higher is better)
WATCHED = [
    ("embedding recall p50 ms at the largest size", ("scale", "largest", "p50_ms"), False),
    ("embedding recall p99 ms at the largest size", ("scale", "largest", "p99_ms"), False),
    ("p50 ratio largest/smallest size", ("scale", "p50_ratio"), False),
    ("candidates per lookup at the largest size", ("scale", "largest", "candidates_mean"), False),
    ("disk bytes per trail at the largest size", ("scale", "largest", "footprint", "bytes_per_trail"), False),
    ("HTTP lexical recalls/s", ("http", "recall lexical (half hits)", "per_second"), True),
    ("HTTP lexical recall p99 ms", ("http", "recall lexical (half hits)", "p99_ms"), False),
    ("HTTP embedding recalls/s (distinct)", ("http", "recall embedding (distinct questions)", "per_second"), True),
    ("HTTP embedding recall p99 ms (distinct)", ("http", "recall embedding (distinct questions)", "p99_ms"), False),
    ("HTTP embedding recalls/s (half repeats)", ("http", "recall embedding (half repeats)", "per_second"), True),
    ("HTTP records/s", ("http", "record", "per_second"), True),
    (
        "HTTP lexical recall CPU ms (all processes)",
        ("http", "recall lexical (half hits)", "cpu_ms_per_request", "total"),
        False,
    ),
    (
        "HTTP embedding recall CPU ms (distinct)",
        ("http", "recall embedding (distinct questions)", "cpu_ms_per_request", "total"),
        False,
    ),
    ("overload: slowest answer ms", ("http", "overload", "max_ms"), False),
    ("overload without a proxy: answered p99 ms", ("http", "overload without a proxy", "p99_ms"), False),
    ("overload without a proxy: 503 p99 ms", ("http", "overload without a proxy", "shed_p99_ms"), False),
    ("worker RSS growth MB (largest)", ("http", "memory", "largest_growth_mb"), False),
    ("worker RSS after 100k / after 1k (largest)", ("http", "memory", "largest_rss_ratio"), False),
    ("embedding recall rate / the model alone", ("http", "floors", "embedding", "rate_ratio"), True),
    ("lexical recall CPU / a trivial endpoint", ("http", "floors", "lexical", "cpu_ratio"), False),
    ("GPTCache get() p50 / recall() p50 at 100k", ("peer", "sizes", "100000", "ratio_p50"), True),
    ("GPTCache get() p99 / recall() p99 at 100k", ("peer", "sizes", "100000", "ratio_p99"), True),
    ("GPTCache get() p50 / recall() p50 at 1M", ("peer", "sizes", "1000000", "ratio_p50"), True),
    ("GPTCache get() p99 / recall() p99 at 1M", ("peer", "sizes", "1000000", "ratio_p99"), True),
    ("recall() p50 / pgvector p50 at 100k, fresh", ("peer", "sizes", "100000", "fresh", "pgvector_p50"), False),
    ("recall() p99 / pgvector p99 at 100k, fresh", ("peer", "sizes", "100000", "fresh", "pgvector_p99"), False),
    ("recall() p50 / pgvector p50 at 100k, analysed", ("peer", "sizes", "100000", "analysed", "pgvector_p50"), False),
    ("recall() p99 / pgvector p99 at 100k, analysed", ("peer", "sizes", "100000", "analysed", "pgvector_p99"), False),
]


def lookup(results: dict, path: tuple[str, ...]):
    for part in path:
        if not isinstance(results, dict) or part not in results:
            return None
        results = results[part]
    return results


def comparison(previous: dict, current: dict, tolerance: float = 0.15) -> list[str]:
    """One line per watched figure: before, now, change; REGRESSION where it got worse past the tolerance."""
    lines = []
    for name, path, higher_better in WATCHED:
        old, new = lookup(previous, path), lookup(current, path)
        if old is None or new is None:
            continue
        change = (new - old) / old if old else 0.0
        worse = -change if higher_better else change
        flag = "  REGRESSION" if worse > tolerance else ""
        lines.append(f"  {name:<45} {old:>9} -> {new:<9} ({change:+.0%}){flag}")
    return lines


class Command(BaseCommand):
    help = "Runs benchmark_scale, benchmark_http and benchmark_peer, writes bench-out/bench-<time>.json and compares with the previous run."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--sizes", type=int, nargs="+", default=[10_000, 100_000], help="store sizes of the scale benchmark"
        )
        parser.add_argument("--seconds", type=float, default=20.0, help="length of each HTTP throughput run")
        parser.add_argument("--memory-requests", type=int, default=100_000)
        # 1M adds ~20 minutes here: the ragtrail fill (7 min), GPTCache's import (4) and its ~180 ms scans (6).
        parser.add_argument(
            "--peer-sizes", type=int, nargs="+", default=[100_000], help="store sizes of the GPTCache comparison"
        )
        parser.add_argument("--out", type=Path, default=Path(settings.BASE_DIR) / "bench-out")

    def handle(self, *args, sizes, seconds, memory_requests, peer_sizes, out: Path, **options) -> None:
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        scale_file, http_file, peer_file = (
            out / f"scale-{stamp}.json",
            out / f"http-{stamp}.json",
            out / f"peer-{stamp}.json",
        )
        self.stdout.write("== embedding recall as one scope grows (in-process, PostgreSQL) ==")
        call_command("benchmark_scale", sizes=sizes, json_path=scale_file, stdout=self.stdout)
        self.stdout.write("\n== HTTP: gunicorn on PostgreSQL, load generator included ==")
        call_command(
            "benchmark_http", seconds=seconds, memory_requests=memory_requests, json_path=http_file, stdout=self.stdout
        )
        self.stdout.write(
            f"\n== against pgvector and GPTCache 0.1.44 at {', '.join(f'{n:,}' for n in peer_sizes)} questions, embedding excluded on every side =="
        )
        call_command("benchmark_peer", sizes=peer_sizes, json_path=peer_file, stdout=self.stdout)
        scale = json.loads(scale_file.read_text())
        scale["largest"] = scale["sizes"][str(max(sizes))]
        http = json.loads(http_file.read_text())
        http["memory"]["largest_growth_mb"] = max(http["memory"]["growth_mb"].values(), default=0.0)
        http["memory"]["largest_rss_ratio"] = max(http["memory"]["rss_ratio"].values(), default=0.0)
        current = {
            "when": stamp,
            "sizes": sizes,
            "scale": scale,
            "http": http,
            "peer": json.loads(peer_file.read_text()),
        }
        latest = out / "bench-latest.json"
        self.stdout.write("")
        if latest.exists():
            previous = json.loads(latest.read_text())
            self.stdout.write(
                f"== against the previous run ({previous.get('when', '?')}, sizes {previous.get('sizes')}) =="
            )
            self.stdout.write("\n".join(comparison(previous, current)) or "  nothing comparable")
        else:
            self.stdout.write("== no previous run in bench-out/ to compare with ==")
        (out / f"bench-{stamp}.json").write_text(json.dumps(current, indent=2))
        latest.write_text(json.dumps(current, indent=2))
        self.stdout.write(f"figures: {out / f'bench-{stamp}.json'}")
