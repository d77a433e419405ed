"""A recorded figure replaces the target's previous one, and the run says what it replaced."""

from __future__ import annotations

import json

from evaluation import results


def test_recording_a_figure_says_the_one_it_replaces_and_keeps_only_the_latest(tmp_path):
    path, said = tmp_path / "results.json", []
    results.record(
        "fill-10m",
        target="filled within an hour",
        command="c",
        measured="3,882 s",
        met=False,
        path=path,
        say=said.append,
    )
    assert said == ["recorded fill-10m: 3,882 s (met: no)", "  previously: nothing recorded"]
    said.clear()
    results.record(
        "fill-10m",
        target="filled within an hour",
        command="c",
        measured="2,793 s",
        met=True,
        path=path,
        say=said.append,
    )
    assert said[0] == "recorded fill-10m: 2,793 s (met: yes)"
    assert said[1].startswith("  previously: 3,882 s (met: no; ")
    kept = json.loads(path.read_text())["targets"]
    assert [(t["id"], t["measured"], t["met"]) for t in kept] == [("fill-10m", "2,793 s", True)]
