"""What guards the section store's writes: the contextvars Section.upsert sets while it writes,
the check that refuses a text, hash or id written around it, and the signal its writes send."""

from __future__ import annotations

import contextvars
from typing import Iterable

from django.dispatch import Signal

# Sent inside the transaction of every write that changes or removes sections, with
# `scope`, `section_ids` and `at`. The trails app flags the trails citing them; the
# store itself knows nothing of trails (a lower app never imports an upper one).
sections_changed = Signal()

# Set while Section.upsert writes, so the guards below let its own bulk writes through.
_store_writing: contextvars.ContextVar[bool] = contextvars.ContextVar("section_store_writing", default=False)
# Set while a hashes-only scope's sections are written: the hash is the source's (there is no text to hash).
_hashes_given: contextvars.ContextVar[bool] = contextvars.ContextVar("section_hashes_given", default=False)

STORE_FIELDS = frozenset({"text", "hash", "section_id", "scope", "scope_id"})


def _refuse_write_around_the_store(fields: Iterable[str]) -> None:
    if not _store_writing.get() and STORE_FIELDS & set(fields):
        raise ValueError(
            "a section's text, hash or id changes only through Section.upsert (or save/remove), which "
            "hashes the text, keeps the old revision and flags the trails citing it"
        )
