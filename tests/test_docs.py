"""The README and docs/ are for users: they say what the product does, not how it was made."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "clients" / "python" / "README.md"]
# Words of a lab notebook: which working session, day or tracker issue a thing came from.
# ("session" alone is the product's own word: an agent run's id.)
HISTORY = re.compile(r"\b(sessions?|issues?|days?|stops?)\s+#?\d+\b|\b(first|second|third|last) day\b", re.IGNORECASE)


def test_no_page_tells_how_the_project_was_made():
    found = [f"{page.relative_to(ROOT)}:{n}: {match.group(0)}" for page in PAGES
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) for match in HISTORY.finditer(line)]
    assert found == []


def test_the_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "run"], ["make", "test"]]


def test_every_page_the_readme_and_docs_link_exists():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text(encoding="utf-8")):
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert missing == []
