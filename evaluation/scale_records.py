"""What benchmark_scale keeps of a run: its figures in the results file, and how its answers
compare with a previous run's."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from evaluation import results


def record_scale(
    say: Callable[[str], None], figures: dict, size: int, small: int, answers_like: Path | None, scopes: int = 1
) -> None:
    """Keeps a scale run's figures: disk per trail, the fill's time at many scopes, interleaved recall."""
    row, label = figures["sizes"][size], results.SIZE_LABELS.get(size * scopes, str(size * scopes))
    store = f"{size * scopes:,} trails" + (f" ({scopes} scopes of {size:,})" if scopes > 1 else "")
    flags = (
        f"--sizes {size}"
        + (f" --scopes {scopes}" if scopes > 1 else "")
        + (" --indexes-after" if "index_build_s" in row else "")
    )
    disk = row.get("footprint") or {}
    if disk:
        against = figures.get("against", {}).get(str(size))
        same = (
            f"; the same answer to {against['same_answers']} of {against['of']} questions as {answers_like.name}"
            if against
            else ""
        )
        tables = ", ".join(
            f"{name.removeprefix('trails_')} {t['bytes_per_trail']:,}" for name, t in disk["tables"].items()
        )
        results.record(
            f"footprint-{label}",
            say=say,
            target=f"disk per trail at {store} <= 3 KB, the same answers",
            command=f"`benchmark_scale {flags} --analyze --record` on a new database",
            measured=f"**{disk['bytes_per_trail']:,} bytes** ({tables}; {disk['bytes'] / 2**30:.1f} GiB in all, filled in "
            f"{row['fill_s']:,.0f} s){same}; correct hits {row['correct_hits']['index']} "
            f"of {row['correct_hits']['of']} (brute force {row['correct_hits']['brute_force']}), false hits "
            f"{row['false_hits']['index']} of {row['false_hits']['of']} (brute force {row['false_hits']['brute_force']})",
            met=disk["bytes_per_trail"] <= 3072 and (not against or against["same_answers"] == against["of"]),
        )
        if scopes > 1:
            building = (
                f"; the indexes that hold no constraint built after the rows, in {row['index_build_s']:,.0f} s"
                if "index_build_s" in row
                else "; every index written row by row"
            )
            vacuumed = f"; then VACUUM ANALYZE {row['analyze_s']:,.0f} s" if "analyze_s" in row else ""
            results.record(
                f"fill-{label}",
                say=say,
                target=f"{store} filled within an hour (signed in numpy, written with COPY)",
                command=f"`benchmark_scale {flags} --analyze --record` on a new database",
                measured=f"**{row['fill_s']:,.0f} s** ({row['fill_s'] / 60:.0f} min{building}{vacuumed}); "
                f"{disk['bytes'] / 2**30:.1f} GiB, {disk['bytes_per_trail']:,} bytes a trail",
                met=row["fill_s"] <= 3600,
            )
    paired = figures.get("interleaved")
    if paired:
        large, little = paired["large"], paired["small"]
        results.record(
            f"scale-{label}",
            say=say,
            target=f"recall at {store} within 1.5x of {small:,}, interleaved",
            command=f"`benchmark_scale {flags} --recalls 2000 --interleaved {small} --analyze --record`",
            measured=f"{figures['database']}: p50 {large['p50_ms']:.2f} against {little['p50_ms']:.2f} ms, **{paired['p50_ratio']}x**; "
            f"p99 {large['p99_ms']:.2f} against {little['p99_ms']:.2f} ms, **{paired['p99_ratio']}x**",
            met=paired["p50_ratio"] <= 1.5 and paired["p99_ratio"] <= 1.5,
        )


def against(say: Callable[[str], None], previous: dict, figures: dict) -> dict:
    """The same questions' answers and the disk per trail, size by size, against a previous run."""
    result = {}
    for size, row in figures["sizes"].items():
        before = previous.get("sizes", {}).get(str(size))
        if not before or "answers" not in before:
            continue
        pairs = list(zip(before["answers"], row["answers"]))
        same = sum(a == b for a, b in pairs)
        old_disk, new_disk = (
            (before.get("footprint") or {}).get("bytes_per_trail"),
            (row.get("footprint") or {}).get("bytes_per_trail"),
        )
        result[str(size)] = {"same_answers": same, "of": len(pairs), "bytes_per_trail": [old_disk, new_disk]}
        say(
            f"against the previous run at {int(size):,} trails: the same answer to {same} of {len(pairs)} questions; "
            f"disk per trail {old_disk:,} -> {new_disk:,} bytes"
            if old_disk and new_disk
            else f"against the previous run at {int(size):,} trails: the same answer to {same} of {len(pairs)} questions"
        )
    return result
