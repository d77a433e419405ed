"""The evaluation report: one JSON document, and a self-contained HTML page drawn from it.

Every figure and table in the HTML is computed from the JSON of the same run. The
HTML inlines the plotly.js bundle of the pinned plotly package, so it opens with no
network. Volatile values (timings, the creation time) sit under keys named in
VOLATILE_KEYS, so two runs can be compared with `stable()`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from django.template.loader import render_to_string

VOLATILE_KEYS = frozenset({"timing", "created_at", "duration_s", "git_commit", "git_dirty"})
ARM_COLOURS = {"lexical": "#805ad5", "embedding (no guard)": "#a0aec0", "embedding + guard": "#2b6cb0"}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_state(folder: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, cwd=folder, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "git_commit": git("rev-parse", "HEAD") or "unknown",
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def environment() -> dict[str, str]:
    import django
    import numpy

    return {"python": platform.python_version(), "django": django.get_version(), "numpy": numpy.__version__}


def stable(value: Any) -> Any:
    """The report without its volatile values, for comparing runs."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def _pct(value: float) -> str:
    return f"{100 * value:.2f} %"


def headline(report: dict) -> list[list[str]]:
    """The few lines an operator reads first, as [measure, value] rows."""
    rows: list[list[str]] = []
    results = report["experiments"]
    if "matching" in results:
        for matcher, point in results["matching"]["defaults"].items():
            threshold = point["embedding_threshold"] if matcher == "embedding" else point["lexical_threshold"]
            label = f"Matching, {matcher} default" + (f" @ {threshold}" if matcher != "both" else "")
            held = point["validation"]
            rows.append(
                [
                    label + ", validation split (not fitted)",
                    f"correct hits {_pct(held['correct_rate'])} [{_pct(held['correct_ci'][0])}, {_pct(held['correct_ci'][1])}], "
                    f"false hits {_pct(held['false_rate'])} [{_pct(held['false_ci'][0])}, {_pct(held['false_ci'][1])}] (95 % CI), "
                    f"wrong {_pct(held['wrong_rate'])} ({held['duplicates'] + held['distinct']:,} pairs)",
                ]
            )
    if "staleness" in results:
        for arm in results["staleness"]["results"]:
            r, t = arm["ragtrail"], arm["text_cache"]
            rows.append(
                [
                    f"Staleness, {arm['edit']}, {arm['cited_per_trail']} cited per trail ({arm['changed_sections']} cited sections changed)",
                    f"ragtrail served {r['stale_served']} stale ({r['prefetch_kept']} prefetch, {r['hint']} hint, {r['miss']} miss); "
                    f"text cache served {t['stale_served']} stale ({_pct(t['stale_share_of_hits'])} of its hits)",
                ]
            )
    if "calls" in results:
        for row in results["calls"]["rows"]:
            w, c = row["without_cache"], row["with_ragtrail"]
            rows.append(
                [
                    f"Calls, {row['repeat_share']:.0%} repeats",
                    f"{w['tool_calls_per_question']:.2f} → {c['tool_calls_per_question']:.2f} tool calls per question, "
                    f"{w['context_tokens_per_question']:.0f} → {c['context_tokens_per_question']:.0f} context tokens, "
                    f"right section {_pct(w['reached_right_section'])} → {_pct(c['reached_right_section'])}; "
                    f"cost per 1,000 questions ${w['cost_per_1000_questions_usd']:.2f} → ${c['cost_per_1000_questions_usd']:.2f}",
                ]
            )
    return rows


def _layout(title: str, x: str, y: str, **extra) -> dict:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "height": 380,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def figures(report: dict) -> dict[str, dict]:
    """Plotly figure dicts for each experiment present."""
    results, out = report["experiments"], {}
    if "matching" in results:
        data = []
        for arm, points in results["matching"]["curves"].items():
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": arm,
                    "line": {"color": ARM_COLOURS.get(arm)},
                    "x": [round(100 * p["all"]["false_rate"], 3) for p in points],
                    "y": [round(100 * p["all"]["correct_rate"], 3) for p in points],
                    "text": [f"threshold {p['threshold']}" for p in points],
                    "hovertemplate": "%{text}<br>false %{x}%<br>correct %{y}%",
                }
            )
        for matcher, point in results["matching"]["defaults"].items():
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{matcher} default",
                    "marker": {"size": 13, "symbol": "star"},
                    "x": [round(100 * point["all"]["false_rate"], 3)],
                    "y": [round(100 * point["all"]["correct_rate"], 3)],
                }
            )
        out["matching"] = {
            "data": data,
            "layout": _layout(
                "Matching: correct hits on duplicates against false hits on non-duplicates",
                "false-hit rate (%)",
                "correct-hit rate (%)",
            ),
        }
    if "staleness" in results:
        arms = results["staleness"]["results"]
        edits = [f"{a['edit']} · {a['cited_per_trail']} cited" for a in arms]
        out["staleness"] = {
            "data": [
                {
                    "type": "bar",
                    "name": "ragtrail",
                    "x": edits,
                    "y": [a["ragtrail"]["stale_served"] for a in arms],
                    "marker": {"color": "#2f855a"},
                },
                {
                    "type": "bar",
                    "name": "text cache",
                    "x": edits,
                    "y": [a["text_cache"]["stale_served"] for a in arms],
                    "marker": {"color": "#c53030"},
                },
            ],
            "layout": _layout(
                "Staleness: changed sections served as if current", "edit", "stale sections served", barmode="group"
            ),
        }
    if "calls" in results:
        rows = results["calls"]["rows"]
        shares = [f"{r['repeat_share']:.0%}" for r in rows]
        out["calls"] = {
            "data": [
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": "no cache",
                    "x": shares,
                    "y": [r["without_cache"]["tool_calls_per_question"] for r in rows],
                },
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": "ragtrail",
                    "x": shares,
                    "y": [r["with_ragtrail"]["tool_calls_per_question"] for r in rows],
                },
            ],
            "layout": _layout(
                "Tool calls per question",
                "repeats in the workload",
                "tool calls per question",
                yaxis={"rangemode": "tozero", "title": {"text": "tool calls per question"}},
            ),
        }
        out["cost"] = {
            "data": [
                {
                    "type": "bar",
                    "name": "no cache",
                    "x": shares,
                    "y": [r["without_cache"]["cost_per_1000_questions_usd"] for r in rows],
                    "marker": {"color": "#a0aec0"},
                },
                {
                    "type": "bar",
                    "name": "ragtrail",
                    "x": shares,
                    "y": [r["with_ragtrail"]["cost_per_1000_questions_usd"] for r in rows],
                    "marker": {"color": "#2b6cb0"},
                },
            ],
            "layout": _layout("Cost per 1,000 questions (USD)", "repeats in the workload", "USD", barmode="group"),
        }
    return out


def render_html(report: dict) -> str:
    import plotly.offline

    css = (Path(__file__).resolve().parents[1] / "static" / "css" / "ops.css").read_text()
    return render_to_string(
        "trails/evaluation/eval_report.html",
        {
            "report": report,
            "headline": report.get("headline", []),
            "figures": figures(report),
            "plotly_js": plotly.offline.get_plotlyjs(),
            "css": css,
            "report_json": json.dumps(report, indent=2, ensure_ascii=False),
        },
    )


def write(folder: Path, report: dict) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, html_path = folder / "report.json", folder / "report.html"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path
