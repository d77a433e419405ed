"""Docs projects as teams run them: MyST pages, includes from the repository, autodoc, MkDocs'
slugify and snippets, ids equal to the built site's anchors, honest token counts.

The fixture projects under tests/fixtures/projects are built with the real tools (Sphinx 7.4
with myst-parser and autodoc, MkDocs with pymdown-extensions) by the last test, which checks
every id against the anchors in the HTML they write.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.tokens import count_tokens
from scopes.splitting import SplitError, split_project
from trails.core.budget import cut_to_budget
from trails.management.commands.check_anchors import built_ids

FIXTURES = Path(__file__).parents[1] / "fixtures" / "projects"
DOC_TOOLS = Path(__file__).parents[2] / ".venv-doc-tools" / "bin"


@pytest.fixture
def sphinx_repo(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "sphinx-repo", tmp_path / "sphinx-repo"))


@pytest.fixture
def mkdocs_repo(tmp_path) -> Path:
    repo = Path(shutil.copytree(FIXTURES / "mkdocs-repo", tmp_path / "mkdocs-repo"))
    (repo / ".git").mkdir()  # the repository's root, as a clone has it
    return repo


def by_id(folder: Path) -> dict:
    return {s.id: s for s in split_project(folder)[1]}


def test_myst_pages_are_read_where_the_extension_registers_them(sphinx_repo):
    project, sections = split_project(sphinx_repo / "docs")
    # source_suffix lists .md as the default type; myst_parser makes it Markdown (MyST).
    assert project.formats == {".rst": "rst", ".md": "myst"}
    assert {s.path for s in sections} == {"index.rst", "reference.rst", "guide.md", "changes.rst"}
    # conf.py naming no suffix at all: the extension's .md is still a page, and a root
    # document written in MyST is no missing root document.
    conf = sphinx_repo / "docs" / "conf.py"
    conf.write_text(conf.read_text().replace('source_suffix = [".rst", ".md"]\n', ""))
    (sphinx_repo / "docs" / "index.rst").rename(sphinx_repo / "docs" / "start.rst")
    (sphinx_repo / "docs" / "index.md").write_text("# Home\n\nWelcome.\n")
    project, sections = split_project(sphinx_repo / "docs")
    assert "index.md" in {s.path for s in sections}
    assert not [n for n in project.notes if "root document" in n and "warning" in n]


def test_ids_are_the_built_sites_anchors_and_unstable_ones_are_recorded_beside(sphinx_repo, mkdocs_repo):
    sections = by_id(sphinx_repo / "docs")
    links = {i: s.anchor for i, s in sections.items()}
    assert links == {
        "changes.rst#1-0": "id1",  # a digit-only title: docutils builds id1
        "guide.md": None,
        "guide.md#visiting": None,  # a MyST target above the heading
        "guide.md#examples": None,
        "guide.md#examples-2": "id1",  # a repeated title
        "guide.md#2-0": "id2",
        "guide.md#why-doesnt-it-open": None,  # smartquotes: doesn’t, whose ’ docutils drops
        "guide.md#the-wardpkg-visit-class": None,  # a role shows its text, not its name
        "guide.md#gone-deprecated": None,
        "guide.md#parking": None,  # from the README the page includes
        "index.rst": None,
        "reference.rst": None,
        "reference.rst#bootstrapping-hooks": None,
        "reference.rst#wardpkg.pytest_load_initial_conftests": None,
        "reference.rst#collection-hooks": None,
        "reference.rst#wardpkg.pytest_collection": None,
        "reference.rst#wardpkg.Visit": None,
        "reference.rst#wardpkg.errors.WardClosed": None,  # a dotted name is its own module's
        "reference.rst#wardpkg.errors.Closure": None,
        "reference.rst#wardpkg.errors.Closure.reason": None,  # nested in the class autodoc names
        "reference.rst#event-ward-opened": None,  # an object type with a parse_node: the signature's head
        "reference.rst#confval-ward_hours": None,  # two signatures: the first anchors
        "reference.rst#notes": None,  # holds a :no-index: object: Sphinx gives it no anchor
        "reference.rst#examples": None,
        "reference.rst#4-4-7": "id1",
        "reference.rst#other": None,
        "reference.rst#examples-2": "id2",
    }
    assert set(by_id(mkdocs_repo)) == {
        "index.md",
        "index.md#gone--deprecated",  # the configured pymdownx slugify: spaces not collapsed
        "index.md#hours",
        "index.md#parking",  # an emoji's shortcode makes no slug text
        "index.md#hours_1",  # an id given twice: unique here, its link the given one
        "index.md#examples",
        "index.md#examples_1",
        "index.md#café-ünïcode",
        "index.md#contributing",  # a heading inside a snippet
        "index.md#review",
        "index.md#escaped",
    }


def test_autodoc_objects_are_sections_owning_the_targets_above_them(sphinx_repo):
    sections = by_id(sphinx_repo / "docs")
    page = "reference.rst"
    # The hook target and autofunction between two headings are the object's own section,
    # never the heading's anchor nor part of either heading's text.
    assert sections[f"{page}#collection-hooks"].text == "``ward`` calls these while collecting."
    assert sections[f"{page}#bootstrapping-hooks"].text == "Called early."
    assert sections[f"{page}#wardpkg.pytest_collection"].text == (
        ".. hook:: pytest_collection\n.. autofunction:: pytest_collection"
    )
    assert sections[f"{page}#wardpkg.Visit"].text == ".. autoclass:: Visit\n   :members:"
    assert sections[f"{page}#notes"].text.endswith(".. autofunction:: pytest_collection\n   :no-index:")


def test_includes_read_the_repository_and_never_above_it(sphinx_repo):
    docs = sphinx_repo / "docs"
    project, sections = split_project(docs)
    assert any("includes read inside" in n and "pyproject.toml" in n for n in project.notes)
    assert {s.id: s.text for s in sections}["changes.rst#1-0"] == "First release: visiting hours per ward."
    # The missing include sits under `.. only::` (made at build time): a warning, as Sphinx logs it.
    assert any(n.startswith("warning: index.rst:14 includes _generated/build-info.rst") for n in project.notes)
    changelog = sphinx_repo / "CHANGELOG.rst"
    changelog.write_text(changelog.read_text().replace("per ward", "per ward and per day"))
    assert by_id(docs)["changes.rst#1-0"].text == "First release: visiting hours per ward and per day."

    # In a monorepo the repository bounds it, not the nearest package's pyproject.toml.
    (sphinx_repo / ".git").mkdir()
    (docs / "pyproject.toml").write_text("[project]\nname = 'docs'\n")
    assert any(f"includes read inside {sphinx_repo} (it holds .git)" in n for n in split_project(docs)[0].notes)
    assert by_id(docs)["changes.rst#1-0"].text == "First release: visiting hours per ward and per day."

    (sphinx_repo.parent / "outside.rst").write_text("Outside\n")
    os.symlink(sphinx_repo.parent / "outside.rst", sphinx_repo / "linked.rst")
    (sphinx_repo / ".secrets.rst").write_text("token\n")
    for target, message in [
        ("../../outside.rst", "outside .*, where includes may read"),
        ("../linked.rst", "outside .*, where includes may read"),
        ("../.secrets.rst", "a hidden file"),
        ("../MISSING.rst", "which is missing"),
    ]:
        (docs / "changes.rst").write_text(f"Changes\n=======\n\nText.\n\n.. include:: {target}\n")
        with pytest.raises(SplitError, match=rf"changes.rst:6: includes {re.escape(target)}, {message}"):
            split_project(docs)


def test_mkdocs_snippets_are_read_so_a_change_in_the_snippet_is_seen(mkdocs_repo):
    project, sections = split_project(mkdocs_repo)
    assert {s.id: s.anchor for s in sections}["index.md#hours_1"] == "hours"
    texts = {s.id: s.text for s in sections}
    assert texts["index.md#contributing"] == "Open a pull request against main.\n\nTwo reviewers approve each change."
    assert texts["index.md#review"] == "Two reviewers approve each change."
    # `;--8<--` is written, not read; auto_append adds its snippet to every page's end.
    assert texts["index.md#escaped"] == '--8<-- "CONTRIBUTING.md"\n\n\n*[ICU]: Intensive care unit'
    contributing = mkdocs_repo / "CONTRIBUTING.md"
    contributing.write_text(contributing.read_text().replace("Two reviewers", "Three reviewers"))
    after = {s.id: s.text for s in split_project(mkdocs_repo)[1]}
    assert {i for i in texts if texts[i] != after[i]} == {"index.md#contributing", "index.md#review"}
    (mkdocs_repo / "includes" / "abbreviations.md").write_text("*[ICU]: Intensive Care Unit\n")
    assert by_id(mkdocs_repo)["index.md#escaped"].text.endswith("Intensive Care Unit")

    page = mkdocs_repo / "docs" / "index.md"
    page.write_text(page.read_text() + '\n## Later\n\n--8<-- "LATER.md"\n')
    project, _ = split_project(mkdocs_repo)
    assert any("snippet LATER.md could not be found" in n for n in project.notes)
    config = mkdocs_repo / "mkdocs.yml"
    config.write_text(config.read_text().replace('base_path: ["."]', 'base_path: ["."]\n      check_paths: true'))
    with pytest.raises(SplitError, match="snippet LATER.md could not be found"):
        split_project(mkdocs_repo)


TABLE_ROW = "{name:<24}  {value:<30}  {note:<20}"


def simple_table(rows: int, extra_at: int | None = None) -> str:
    rule = "=" * 24 + "  " + "=" * 30 + "  " + "=" * 20
    lines = [rule, TABLE_ROW.format(name="Setting", value="Default", note="Notes"), rule]
    for n in range(rows):
        if n == extra_at:
            lines.append(TABLE_ROW.format(name="ADDED_SETTING", value="on", note="new"))
        lines.append(TABLE_ROW.format(name=f"SETTING_{n}", value=f"value {n * 37}", note="yes" if n % 2 else "no"))
    return "\n".join([*lines, rule])


def test_a_wide_table_counts_its_padding_and_is_never_prefetched_past_the_budget():
    table = simple_table(290)
    # Padding and line breaks are tokens to a real tokenizer: cl100k counts 3,192 here, where
    # words and punctuation alone say 1,965, "within" a 2,000 budget. The count errs high.
    assert len(table) > 23_000
    assert 3_192 <= count_tokens(table) <= 1.25 * 3_192
    cut = cut_to_budget([("settings#table", table)], 2000)
    assert cut.truncated and cut.tokens <= 2000


def test_a_row_added_near_the_top_of_a_long_table_changes_only_the_piece_it_lands_in(tmp_path):
    page = tmp_path / "docs" / "settings.rst"
    page.parent.mkdir()
    page.write_text("Settings\n========\n\nAll of them.\n\nTable\n-----\n\n" + simple_table(400) + "\n")
    before = {s.id: s.text for s in split_project(page.parent)[1]}
    page.write_text("Settings\n========\n\nAll of them.\n\nTable\n-----\n\n" + simple_table(400, 3) + "\n")
    after = {s.id: s.text for s in split_project(page.parent)[1]}
    pieces = [i for i in before if i.startswith("settings.rst#table")]
    assert len(pieces) >= 5 and all(count_tokens(before[i]) <= 2000 for i in pieces)
    changed = {i for i in set(before) | set(after) if before.get(i) != after.get(i)}
    assert len(changed) <= 2, changed  # the piece holding the new row (and, at most, its neighbour)


def test_every_id_links_to_an_anchor_the_real_tools_build(sphinx_repo, mkdocs_repo, tmp_path):
    if not (DOC_TOOLS / "sphinx-build").exists():
        if os.environ.get("CI"):
            pytest.fail("CI builds the fixture projects with Sphinx and MkDocs: make .venv-doc-tools/.installed")
        pytest.skip("Sphinx and MkDocs are not installed here (make .venv-doc-tools/.installed)")
    subprocess.run(
        [DOC_TOOLS / "sphinx-build", "-q", "-b", "html", sphinx_repo / "docs", tmp_path / "sphinx"],
        check=True,
        capture_output=True,
    )
    subprocess.run(  # from the project's root, as teams run it: snippets' base_path is relative to it
        [DOC_TOOLS / "mkdocs", "build", "-q", "-f", mkdocs_repo / "mkdocs.yml", "-d", tmp_path / "mkdocs"],
        check=True,
        capture_output=True,
        cwd=mkdocs_repo,
    )
    checked = 0
    for folder, built, page_of in [
        (sphinx_repo / "docs", tmp_path / "sphinx", lambda path: Path(path).with_suffix(".html")),
        (mkdocs_repo, tmp_path / "mkdocs", lambda path: Path(path).with_suffix("") / "index.html"),
    ]:
        for section in split_project(folder)[1]:
            if "#" not in section.id:
                continue
            html = built / page_of(section.path)
            if html.name == "index.html" and html.parent.name == "index":
                html = built / "index.html"
            link = section.anchor or section.id.split("#", 1)[1]
            assert link in built_ids(html), (section.id, link)
            checked += 1
    assert checked == 34  # every id with an anchor, both projects

    # The command a docs CI runs after its build says the same, and fails when one is missing.
    from io import StringIO

    from django.core.management import call_command

    said = StringIO()
    call_command("check_anchors", str(sphinx_repo / "docs"), built=str(tmp_path / "sphinx"), quiet=True, stdout=said)
    assert (
        "24 sections with an anchor on 3 built pages: 24 link to an anchor of the built page, 0 do not"
        in said.getvalue()
    )
    (tmp_path / "mkdocs" / "index.html").write_text("<h2 id='hours'>Hours</h2>")
    with pytest.raises(SystemExit) as failed:
        call_command("check_anchors", str(mkdocs_repo), built=str(tmp_path / "mkdocs"), quiet=True, stdout=said)
    assert failed.value.code == 2 and "not built: index.md#gone--deprecated (#gone--deprecated)" in said.getvalue()


def test_the_built_anchor_is_stored_beside_the_id_and_moves_no_trail(api, scope, sphinx_repo, tmp_path):
    from scopes.models import Section

    def release() -> list[dict]:
        sections = split_project(sphinx_repo / "docs")[1]
        return [{"id": s.id, "text": s.text, **({"anchor": s.anchor} if s.anchor else {})} for s in sections]

    first = api.call("post", "/scopes/hospital/section-syncs", {"sections": release()})
    assert first.status_code == 200
    got = api.call("get", "/scopes/hospital/sections/reference.rst%23examples-2").json()
    assert got["anchor"] == "id2"  # reference.html#id2 on the built site
    assert api.call("get", "/scopes/hospital/sections/reference.rst%23other").json()["anchor"] == "other"
    # A new digit-only title earlier on the page renumbers docutils' ids: the stable ids keep
    # their text (no trail moves), the links follow the built site.
    page = sphinx_repo / "docs" / "reference.rst"
    page.write_text(page.read_text().replace("Classes\n-------\n", "1.2\n---\n\nEarly.\n\nClasses\n-------\n"))
    second = api.call("post", "/scopes/hospital/section-syncs", {"sections": release()})
    assert second.json()["sections"]["changed"] == 0 and second.json()["sections"]["added"] == 1
    assert Section.objects.get(scope=scope, section_id="reference.rst#examples-2").anchor == "id3"
    bad = api.call("post", "/scopes/hospital/section-syncs", {"sections": [{"id": "a", "text": "x", "anchor": "a\nb"}]})
    assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("sections.0.anchor")


def test_an_include_shown_as_an_example_is_text_not_an_include(sphinx_repo):
    docs = sphinx_repo / "docs"
    (docs / "howto.rst").write_text(
        "How to include\n==============\n\nWrite this::\n\n   .. include:: ../MISSING.rst\n\n"
        ".. code-block:: rst\n\n   .. include:: ../MISSING.rst\n\n..\n   .. include:: ../MISSING.rst\n\n"
        "Shared\n------\n\n.. note::\n\n   .. include:: ../CHANGELOG.rst\n      :start-line: 6\n"
    )
    (docs / "howto.md").write_text(
        "# How to include\n\nIn MyST:\n\n````md\n```{include} ../MISSING.md\n```\n````\n\n"
        "## Shared\n\n:::{note}\n```{include} ../README.md\n:start-line: 6\n```\n:::\n"
    )
    sections = {s.id: s.text for s in split_project(docs)[1]}
    assert ".. include:: ../MISSING.rst" in sections["howto.rst"]
    assert sections["howto.rst#shared"] == ".. note::\n\n   First release: visiting hours per ward."
    assert "```{include} ../MISSING.md" in sections["howto.md"]
    assert sections["howto.md#shared"] == ":::{note}\nThe car park opens at 07:00.\n\n:::"


def test_a_myst_nb_project_reads_its_notebooks_cells_not_their_outputs(tmp_path):
    import json

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text('extensions = ["myst_nb"]\n')
    (docs / "index.md").write_text("# Home\n\nWelcome.\n")
    cells = [
        {"cell_type": "markdown", "source": ["# Visits\n", "\n", "How visits are counted.\n"]},
        {"cell_type": "markdown", "source": "## Counting\n\nRun this:"},
        {"cell_type": "code", "source": ["visits = count()\n", "visits"], "outputs": [{"text": "42"}]},
    ]
    (docs / "visits.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}}))
    sections = {s.id: s.text for s in split_project(docs)[1]}
    assert sections["visits.ipynb"] == "How visits are counted."
    assert sections["visits.ipynb#counting"] == "Run this:\n\n```{code-cell} python\nvisits = count()\nvisits\n```"
    (docs / "broken.ipynb").write_text("{not json")
    with pytest.raises(SplitError, match="broken.ipynb: not a Jupyter notebook"):
        split_project(docs)


def changelog_projects(root: Path, releases: list[str], caching: set[str]) -> tuple[Path, Path]:
    """A Sphinx and an MkDocs changelog, newest release first, each repeating the same titles
    (and "Caching" in the `caching` releases only)."""
    rst, markdown = ["Changelog", "=========", ""], ["# Changelog", ""]
    for version in releases:
        rst += [version, "-" * len(version), ""]
        markdown += [f"## {version}", ""]
        for title in ("Stable style", "Fixes", *(["Caching"] if version in caching else [])):
            rst += [title, "^" * len(title), "", f"- {title} work in release {version}.", ""]
            markdown += [f"### {title}", "", f"- {title} work in release {version}.", ""]
    sphinx = root / "sphinx"
    sphinx.mkdir(parents=True, exist_ok=True)
    (sphinx / "conf.py").write_text('project = "Ward"\n')
    (sphinx / "index.rst").write_text("\n".join(rst) + "\n")
    mkdocs = root / "mkdocs"
    (mkdocs / "docs").mkdir(parents=True, exist_ok=True)
    (mkdocs / "mkdocs.yml").write_text("site_name: Ward\n")
    (mkdocs / "docs" / "index.md").write_text("\n".join(markdown) + "\n")
    return sphinx, mkdocs


def built_links_missing(sphinx: Path, mkdocs: Path, out: Path) -> list[str]:
    """Sections whose link is no anchor of the page the real tools build."""
    subprocess.run([DOC_TOOLS / "sphinx-build", "-q", "-b", "html", sphinx, out / "s"], check=True, capture_output=True)
    subprocess.run(
        [DOC_TOOLS / "mkdocs", "build", "-q", "-f", mkdocs / "mkdocs.yml", "-d", out / "m"],
        check=True,
        capture_output=True,
        cwd=mkdocs,
    )
    missing = []
    for folder, html in ((sphinx, out / "s" / "index.html"), (mkdocs, out / "m" / "index.html")):
        for section in split_project(folder)[1]:
            link = section.anchor or section.id.partition("#")[2]
            if link and link not in built_ids(html):
                missing.append(section.id)
    return missing


def test_releases_added_above_a_changelog_keep_every_unchanged_sections_id_and_trail(db, tmp_path):
    from scopes.models import Scope
    from trails.serving.recall import recall
    from trails.serving.record import RecordInput, record
    from trails.upkeep.sync import sync_sections

    old_releases = ["24.1.0", "23.12.1", "23.12.0"]
    new_releases = ["25.1.0", "24.10.0", "24.8.0", "24.4.2", "24.4.1", "24.4.0", "24.3.0", "24.2.0", *old_releases]
    # "Caching" is a title of one release, then of two: the first keeps its id as it repeats.
    old = changelog_projects(tmp_path / "old", old_releases, {"24.1.0"})
    new = changelog_projects(tmp_path / "new", new_releases, {"24.1.0", "25.1.0"})
    for before, after in zip(old, new):
        was = {s.id: s for s in split_project(before)[1]}
        now = {s.id: s for s in split_project(after)[1]}
        # Every section of the old changelog keeps its id and text; only the new ones are added.
        assert all(now[i].text == s.text for i, s in was.items()), sorted(set(was) - set(now))
        assert len(now) - len(was) == 2 * (len(new_releases) - len(old_releases)) + 1
    sphinx_ids = {s.id: s.anchor for s in split_project(new[0])[1]}
    assert sphinx_ids["index.rst#24-1-0/stable-style"] == "id24"  # docutils numbers them down the page
    assert sphinx_ids["index.rst#25-1-0/stable-style"] == "stable-style"  # the first one built
    assert sphinx_ids["index.rst#24-1-0/caching"] == "id26"
    mkdocs_ids = {s.id: s.anchor for s in split_project(new[1])[1]}
    assert mkdocs_ids["index.md#2410/fixes"] == "fixes_8"  # 24.1.0, the ninth release down

    scope = Scope.objects.create(slug="changelog", matcher="lexical")
    old_sections = split_project(old[0])[1]
    sync_sections(scope, old_sections)
    for section in old_sections:
        record(scope, RecordInput(query=f"what changed: {section.text}", cited=[section.id], signal="accepted"))
    queries = [f"what changed: {s.text}" for s in old_sections]
    assert {recall(scope, q, dry_run=True).outcome.value for q in queries} == {"prefetch"}
    released = sync_sections(scope, split_project(new[0])[1], delete_missing=True)
    assert not released.changed and not released.removed and len(released.added) == 17
    assert not any(released.trails.values())
    assert {recall(scope, q, dry_run=True).outcome.value for q in queries} == {"prefetch"}

    if not (DOC_TOOLS / "sphinx-build").exists():
        if os.environ.get("CI"):
            pytest.fail("CI builds the fixture projects with Sphinx and MkDocs: make .venv-doc-tools/.installed")
        pytest.skip("Sphinx and MkDocs are not installed here (make .venv-doc-tools/.installed)")
    for release, projects in (("old", old), ("new", new)):
        assert built_links_missing(*projects, tmp_path / f"built-{release}") == []


def split_in_a_thread(folder: Path):
    """split_project's result or error; a split still blocked after 60 s (a FIFO read) fails the test."""
    import threading

    outcome: list = []

    def run():
        try:
            outcome.append(split_project(folder))
        except Exception as problem:  # noqa: BLE001 (handed back to the test)
            outcome.append(problem)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert outcome, "the split is still blocked reading"
    return outcome[0]


def fan_out(folder: Path, write_include) -> int:
    """Five files each including the next ten times: 10^5 lines from about 1.1 KB."""
    folder.mkdir(parents=True, exist_ok=True)
    for level in range(5):
        (folder / f"l{level}.txt").write_text("".join(write_include(f"l{level + 1}.txt") for _ in range(10)))
    (folder / "l5.txt").write_text("x\n")
    return sum((folder / f"l{n}.txt").stat().st_size for n in range(6))


def test_includes_that_fan_out_past_the_budget_are_refused_naming_the_chain(tmp_path):
    docs = tmp_path / "docs"
    size = fan_out(docs / "inc", lambda name: f".. include:: {name}\n")
    assert size < 1200
    (docs / "conf.py").write_text("")
    (docs / "index.rst").write_text("Home\n====\n\nText.\n\n.. include:: inc/l0.txt\n")
    refused = split_in_a_thread(docs)
    assert isinstance(refused, SplitError)
    assert re.fullmatch(
        r"index.rst:6: includes expand past 100,000 lines or 16 MiB "
        r"\(through inc/l0.txt(?: → l[1-5].txt)*\): refused",
        str(refused),
    ), str(refused)
    # Within the budget the same chain expands in full, each file read once.
    from scopes.splitting import includes

    spent = includes.Expansion()
    text = includes.expand_includes(
        (docs / "inc" / "l2.txt").read_text(), docs / "inc" / "l2.txt", docs, tmp_path, print, "rst", spent
    )
    assert text.count("x") == 1000 and len(spent.files) == 3

    repo = tmp_path / "mkdocs"
    fan_out(repo / "docs" / "inc", lambda name: f'--8<-- "docs/inc/{name}"\n')
    (repo / "mkdocs.yml").write_text("site_name: S\nmarkdown_extensions:\n  - pymdownx.snippets\n")
    (repo / "docs" / "index.md").write_text('# Home\n\nText.\n\n--8<-- "docs/inc/l0.txt"\n')
    refused = split_in_a_thread(repo)
    assert isinstance(refused, SplitError) and str(refused).startswith("index.md:5: includes expand past 100,000")
    assert "(through docs/inc/l0.txt → docs/inc/l1.txt" in str(refused)


def test_a_fifo_among_the_pages_or_included_is_refused_at_once_naming_it(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text("")
    (docs / "index.rst").write_text("Home\n====\n\nText.\n")
    os.mkfifo(docs / "page.rst")
    refused = split_in_a_thread(docs)
    assert isinstance(refused, SplitError) and str(refused) == "page.rst: is a FIFO, not a regular file: refused"
    (docs / "page.rst").unlink()
    os.mkfifo(docs / "shared.txt")
    (docs / "index.rst").write_text("Home\n====\n\nText.\n\n.. include:: shared.txt\n")
    refused = split_in_a_thread(docs)
    assert str(refused) == "index.rst:6: includes shared.txt, which is a FIFO, not a regular file: refused"
    os.mkfifo(docs / "ext.py")  # read for the project's roles and object types: skipped, never waited on
    (docs / "index.rst").write_text("Home\n====\n\nText.\n")
    assert {s.id for s in split_in_a_thread(docs)[1]} == {"index.rst"}

    repo = tmp_path / "mkdocs"
    (repo / "docs").mkdir(parents=True)
    (repo / "mkdocs.yml").write_text("site_name: S\nmarkdown_extensions:\n  - pymdownx.snippets\n")
    (repo / "docs" / "index.md").write_text('# Home\n\nText.\n\n--8<-- "docs/pipe.md"\n')
    os.mkfifo(repo / "docs" / "pipe.md")
    refused = split_in_a_thread(repo)
    assert isinstance(refused, SplitError) and str(refused) == "pipe.md: is a FIFO, not a regular file: refused"
    (repo / "docs" / "pipe.md").unlink()
    (repo / "shared").mkdir()
    (repo / ".git").mkdir()
    os.mkfifo(repo / "shared" / "pipe.md")
    (repo / "docs" / "index.md").write_text('# Home\n\nText.\n\n--8<-- "shared/pipe.md"\n')
    refused = split_in_a_thread(repo)
    assert str(refused) == "index.md:5: includes shared/pipe.md, which is a FIFO, not a regular file: refused"


def build_and_check(folder: Path, built: Path, tool: str) -> None:
    """Builds the project with its real tool and checks every section's link against the page built."""
    if not (DOC_TOOLS / "sphinx-build").exists():
        if os.environ.get("CI"):
            pytest.fail("CI builds the fixture projects with Sphinx and MkDocs: make .venv-doc-tools/.installed")
        pytest.skip("Sphinx and MkDocs are not installed here (make .venv-doc-tools/.installed)")
    if tool == "sphinx":
        command, cwd = [DOC_TOOLS / "sphinx-build", "-q", "-b", "html", folder, built], None
    else:
        command, cwd = [DOC_TOOLS / "mkdocs", "build", "-q", "-f", folder / "mkdocs.yml", "-d", built], folder
    subprocess.run(command, check=True, capture_output=True, cwd=cwd)
    for section in split_project(folder)[1]:
        if "#" in section.id:
            page = Path(section.path).with_suffix(".html" if tool == "sphinx" else "")
            html = built / (page if tool == "sphinx" else page / "index.html")
            if html.parent.name == "index" and tool != "sphinx":
                html = built / "index.html"
            assert (section.anchor or section.id.split("#", 1)[1]) in built_ids(html), section.id


def test_every_include_a_markdown_page_shows_is_read_and_a_dotted_base_path_the_config_names(tmp_path):
    repo = tmp_path / "site"
    (repo / ".git").mkdir(parents=True)
    (repo / "examples").mkdir()
    (repo / "examples" / "hello.py").write_text('def greet():\n    return "hello"\n')
    snippets = repo / "docs" / "guide" / ".snippets"
    snippets.mkdir(parents=True)
    (snippets / "note.md").write_text("Visitors sign in at the desk.\n")
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "mkdocs.yml").write_text(
        "site_name: Site\nmarkdown_extensions:\n  - attr_list\n  - mdx_include:\n      base_path: .\n"
        "  - pymdownx.snippets:\n      base_path: [docs/guide/.snippets]\n      check_paths: true\n"
    )
    page = "# Home\n\nIntro.\n\n## Example\n\n```python\n{!examples/hello.py!}\n```\n\n## Lines\n\n{!examples/hello.py [ln:2]!}\n\n"
    page += '## Note\n\n--8<-- "note.md"\n\n## Plain `{x}`\n\nA code span with braces.\n'
    (repo / "docs" / "index.md").write_text(page)
    sections = {s.id: s.text for s in split_project(repo)[1]}
    assert sections["index.md#example"] == '```python\ndef greet():\n    return "hello"\n```'
    assert sections["index.md#lines"] == '    return "hello"'
    assert sections["index.md#note"] == "Visitors sign in at the desk."  # read from the dotted base_path
    assert "index.md#plain-x" in sections  # a code span's braces are no attribute list
    build_and_check(repo, tmp_path / "built", "mkdocs")

    (repo / "examples" / "hello.py").write_text('def greet():\n    return "good day"\n')
    after = {s.id: s.text for s in split_project(repo)[1]}
    assert {i for i in sections if after[i] != sections[i]} == {"index.md#example", "index.md#lines"}
    # Other hidden files stay refused, even next to the named folder.
    (repo / "docs" / "index.md").write_text(page + "\n## Secret\n\n{!.env!}\n")
    with pytest.raises(SplitError, match=r"index.md:\d+: includes .env, a hidden file the sync never reads"):
        split_project(repo)
    (repo / "docs" / "index.md").write_text(page + "\n## Gone\n\n{!examples/gone.py!}\n")
    with pytest.raises(SplitError, match=r"index.md:\d+: includes examples/gone.py, which is missing"):
        split_project(repo)

    # An includer the sync does not read is named, never silent.
    config = repo / "mkdocs.yml"
    config.write_text(config.read_text() + "plugins:\n  - include-markdown\n")
    (repo / "docs" / "index.md").write_text(page)
    assert any("include-markdown adds text at build time" in n for n in split_project(repo)[0].notes)

    # markdown-include-variants' `{* file *}` shows the file as a code block.
    (repo / "mkdocs.yml").write_text("site_name: Site\nmarkdown_extensions:\n  - markdown_include_variants\n")
    (repo / "docs" / "index.md").write_text("# Home\n\nIntro.\n\n## Example\n\n{* examples/hello.py hl[2] *}\n")
    project, made = split_project(repo)
    assert {s.id: s.text for s in made}["index.md#example"] == '```py\ndef greet():\n    return "good day"\n```'
    assert not [n for n in project.notes if n.startswith("warning")]  # hl[2] highlights: the text is whole
    (repo / "docs" / "index.md").write_text("# Home\n\nIntro.\n\n## Example\n\n{* examples/hello.py ln[1] hl[2] *}\n")
    assert any("options (ln[1]) are not read" in note for note in split_project(repo)[0].notes)


def test_literalinclude_and_quoted_myst_options_are_read_as_sphinx_reads_them(tmp_path):
    repo = tmp_path / "repo"
    docs = repo / "docs"
    docs.mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / "examples").mkdir()
    (repo / "examples" / "hello.py").write_text(
        'import os\n\n\n@staticmethod\ndef greet():\n    return "hello"\n\n\ndef other():\n    pass\n'
    )
    (repo / "README.md").write_text("# Ward\n\n<!-- teaser-begin -->\nThe teaser.\n<!-- teaser-end -->\n\nThe rest.\n")
    (docs / "conf.py").write_text('extensions = ["myst_parser"]\n')
    (docs / "index.rst").write_text(
        "Home\n====\n\nText.\n\n.. toctree::\n\n   guide\n\nExample\n-------\n\n"
        ".. literalinclude:: ../examples/hello.py\n   :pyobject: greet\n\nAfter.\n"
    )
    (docs / "guide.md").write_text(
        "# Guide\n\n## Teaser\n\n```{include} ../README.md\n:start-after: 'teaser-begin -->'\n"
        ':end-before: "<!-- teaser-end"\n```\n\n## Code\n\n```{literalinclude} ../examples/hello.py\n'
        ":lines: 1\n```\n"
    )
    sections = {s.id: s.text for s in split_project(docs)[1]}
    assert sections["index.rst#example"] == (
        ".. literalinclude:: ../examples/hello.py\n   :pyobject: greet\n\n"
        '   @staticmethod\n   def greet():\n       return "hello"\n\nAfter.'
    )
    assert sections["guide.md#teaser"] == "The teaser."
    assert sections["guide.md#code"] == "```{literalinclude} ../examples/hello.py\n:lines: 1\nimport os\n```"
    build_and_check(docs, tmp_path / "built", "sphinx")
    (repo / "examples" / "hello.py").write_text((repo / "examples" / "hello.py").read_text().replace("hello", "hi"))
    after = {s.id: s.text for s in split_project(docs)[1]}
    assert {i for i in sections if after[i] != sections[i]} == {"index.rst#example"}
    # Code holding a fence stays inside the block: its `# comment` is no heading.
    (repo / "examples" / "fenced.py").write_text('DOC = """\n```\n"""\n# not a heading\n')
    (docs / "code.md").write_text("# Code\n\nShown:\n\n```{literalinclude} ../examples/fenced.py\n```\n")
    assert [s.id for s in split_project(docs)[1] if s.path == "code.md"] == ["code.md"]
    (docs / "table.rst").write_text("Table\n=====\n\n.. csv-table:: Hours\n   :file: ../hours.csv\n")
    assert any("table.rst:5 reads a file (:file: ../hours.csv)" in n for n in split_project(docs)[0].notes)


def test_sphinx_roles_and_repeated_objects_take_the_ids_sphinx_builds(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text(
        'import os, sys\n\nsys.path.insert(0, os.path.dirname(__file__))\nextensions = ["ext"]\n'
    )
    (docs / "ext.py").write_text("def setup(app):\n    app.add_role('issue', lambda *a, **k: ([], []))\n")
    (docs / "index.rst").write_text(
        "Changes\n=======\n\n1.1\n---\n\nSee :pep:`506#recommended-filter-settings-for-test-runners` and "
        ":rfc:`2324#section-2.3.2`, :issue:`12`.\n\nFixes\n^^^^^\n\nOne.\n\n1.0\n---\n\nFirst.\n\nFixes\n^^^^^\n\nTwo.\n\n"
        "API\n---\n\n.. py:class:: App\n\n   .. py:attribute:: app\n\n      The app.\n\n"
        "   .. py:attribute:: app\n      :no-index-entry:\n\n      The app, again.\n\n2.0\n---\n\nLater.\n"
    )
    anchors = {s.id: s.anchor for s in split_project(docs)[1]}
    assert anchors["index.rst#1-1/fixes"] == "fixes"
    assert anchors["index.rst#1-0/fixes"] == "id3"  # after 1.1's id1 and 1.0's id2: the roles took none
    assert anchors["index.rst#App.app"] is None
    assert anchors["index.rst#App.app-2"] == "id0"  # Sphinx's id for an object described again
    assert anchors["index.rst#2-0"] == "id4"
    build_and_check(docs, tmp_path / "built", "sphinx")
