"""The README's agent quickstart, run as written: its shell block through the same management
commands, every Python block in order against a live server, and each `# → …` comment checked
against what the block printed. Editing the quickstart without keeping it true fails here."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import warnings
from pathlib import Path

from django.core.management import call_command

README = Path(__file__).resolve().parents[2] / "README.md"
EXPECTED = re.compile(r"#\s*→\s*(.*)$")


def quickstart_blocks() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("<!-- quickstart:start -->", 1)[1].split("<!-- quickstart:end -->", 1)[0]
    return re.findall(r"```(sh|python)\n(.*?)```", section, flags=re.S)


def manage(argv: list[str]) -> str:
    """Runs `[NAME=value …] .venv/bin/python manage.py <command> …` in this process (the test's
    database; the settings a line sets for its process are the ones `make run` has, so moot here)."""
    while argv and "=" in argv[0] and not argv[0].startswith("."):
        argv = argv[1:]
    assert argv[:2] == [".venv/bin/python", "manage.py"], argv
    out = io.StringIO()
    call_command(*argv[2:], stdout=out)
    return out.getvalue().strip()


def run_shell(block: str, environ: dict[str, str], live_url: str) -> None:
    for line in block.strip().splitlines():
        if line.startswith("export "):
            name, value = line.removeprefix("export ").split("=", 1)
            command = re.fullmatch(r"\$\((.*)\)", value)
            if command:
                value = manage(shlex.split(command.group(1)))
            elif name == "RAGTRAIL_URL":
                value = live_url  # the README's 127.0.0.1:8000 is `make run`; here, the test's server
            environ[name] = value
        else:
            manage(shlex.split(line))


def test_the_readme_quickstart_runs_top_to_bottom_and_prints_what_it_says(live_server, transactional_db, monkeypatch):
    blocks = quickstart_blocks()
    assert [kind for kind, _ in blocks][:2] == ["sh", "python"] and len(blocks) >= 7
    environ: dict[str, str] = {}
    namespace: dict = {}
    printed_everything: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a quickstart that warns is not one a newcomer trusts
        for kind, block in blocks:
            if kind == "sh":
                run_shell(block, environ, live_server.url)
                for name, value in environ.items():
                    monkeypatch.setenv(name, value)
                continue
            expected = [m.group(1).strip() for m in map(EXPECTED.search, block.splitlines()) if m]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block, "README quickstart", "exec"), namespace)  # noqa: S102 -- the README's own code
            printed = out.getvalue().splitlines()
            printed_everything += printed
            assert printed == expected, f"block printed {printed}, the README says {expected}:\n{block}"
    assert environ["RAGTRAIL_API_KEY"].startswith("rt_")
    assert "prefetch ['visiting/icu']" in printed_everything
