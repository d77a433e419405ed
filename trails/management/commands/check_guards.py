"""manage.py check_guards: every guard of docs/consistency.md's table proven by switching it off.

Runs the guards' tests once as they are (they must pass), then once per guard with that guard
switched off (RAGTRAIL_GUARDS_OFF=name): its test must then fail. Exit 1 names each guard whose
test still passed without it, or a test that failed with every guard on. CI runs it (`make test`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

ROW = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|[^|]*\|\s*`(tests/[^`]+)`\s*\|\s*$")


def guard_table(path: Path) -> list[tuple[str, str]]:
    """(name, test node id) of each row of the guard table in docs/consistency.md."""
    return [
        (m.group(1), m.group(2)) for line in path.read_text(encoding="utf-8").splitlines() if (m := ROW.match(line))
    ]


class Command(BaseCommand):
    help = "Switches each guard of docs/consistency.md off in turn; fails if its test still passes."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--only", nargs="*", default=None, help="Check these guards only (by name).")

    def handle(self, *args, only=None, **options) -> None:
        guards = guard_table(Path(settings.BASE_DIR) / "docs" / "consistency.md")
        if not guards:
            raise CommandError("docs/consistency.md has no guard table")
        if only:
            guards = [(name, test) for name, test in guards if name in only]
        tests = sorted({test for _, test in guards})
        started = time.perf_counter()
        if self._pytest(tests, off="") != 0:
            raise CommandError("the guards' tests fail with every guard on: fix them before checking the guards")
        uncaught = []
        for name, test in guards:
            code = self._pytest([test], off=name)
            caught = code == 1  # pytest's "tests failed", not an error of the run itself
            self.stdout.write(f"{'caught ' if caught else 'MISSED '} {name:<44} {test} (exit {code})")
            if not caught:
                uncaught.append(name)
        self.stdout.write(
            f"{len(guards) - len(uncaught)} of {len(guards)} guards caught in {time.perf_counter() - started:.0f} s"
        )
        if uncaught:
            raise CommandError(f"switched off, these guards left their tests passing: {', '.join(uncaught)}")

    def _pytest(self, tests: list[str], off: str) -> int:
        env = {**os.environ, "RAGTRAIL_GUARDS_OFF": off}
        # One test database for every run of the check, made once (this process's id keeps it from the sweep of leftovers).
        env["RAGTRAIL_TEST_RUN"] = f"{os.getpid()}"
        env.pop("DJANGO_SETTINGS_MODULE", None)  # the tests' settings (pytest.ini), not this command's
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--reuse-db", *tests],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL if off else None,
            stderr=subprocess.DEVNULL if off else None,
        )
        return run.returncode
