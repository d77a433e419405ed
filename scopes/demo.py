"""The Python FAQ corpus shipped for the demo scope and the staleness tests."""

from __future__ import annotations

import json
from pathlib import Path

FAQ_DIR = Path(__file__).resolve().parent / "fixtures" / "python-faq"


def faq_sections(revision: str) -> dict[str, str]:
    """Returns {section id: text} at revision "old" (v3.6.0) or "new" (v3.11.0)."""
    if revision not in {"old", "new"}:
        raise ValueError(f"revision must be 'old' or 'new', got {revision!r}")
    with open(FAQ_DIR / f"sections-{revision}.jsonl", encoding="utf-8") as rows:
        return {row["id"]: row["text"] for row in map(json.loads, rows)}


def faq_questions() -> list[dict]:
    """Returns the question rows: {"question", "section_id", "present_in"}."""
    with open(FAQ_DIR / "questions.jsonl", encoding="utf-8") as rows:
        return [json.loads(row) for row in rows]
