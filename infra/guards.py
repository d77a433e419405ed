"""The named guards of docs/consistency.md's table: each is on, except where the guard check
(`manage.py check_guards`) switches one off to prove that its test then fails."""

from __future__ import annotations

import os


def guard_on(name: str) -> bool:
    """Whether the named guard is on: always, except where RAGTRAIL_GUARDS_OFF (a
    comma-separated list of names, set only by the guard check) names it."""
    off = os.environ.get("RAGTRAIL_GUARDS_OFF")
    return not off or name not in off.split(",")
