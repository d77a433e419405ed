"""Documentation folders read as Sphinx and MkDocs read them (no database needed)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from scopes.splitting import SplitError, split_project, split_tree
from trails.core.budget import count_tokens


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


SPHINX_CONF = """
import os, sys
sys.path.append(os.path.abspath("_ext"))
extensions = ["djangodocs"]
source_suffix = {".txt": "restructuredtext"}
root_doc = "contents"
exclude_patterns = ["_build", "_theme", "requirements.txt"]
version = compute_version()  # computed: read as "not literal", never run
"""
EXTENSION = """
def setup(app):
    app.add_crossref_type(directivename="setting", rolename="setting", indextemplate="pair: %s; setting")
    app.add_object_type(directivename="django-admin", rolename="djadmin", parse_node=parse_django_admin_node)
"""
SETTINGS = """\
========
Settings
========

.. currentmodule:: django.conf.settings

Intro to the settings.

.. setting:: SECRET_KEY

``SECRET_KEY``
--------------

Default: ``''`` (Empty string)

A secret key for a particular Django installation.
"""
QUERYSETS = """\
======================
QuerySet API reference
======================

.. currentmodule:: django.db.models.query

This document describes the ``QuerySet`` API.

.. class:: QuerySet(model=None)

    Usually you chain filters.

    .. attribute:: ordered

        ``True`` if the ``QuerySet`` is ordered.

    .. method:: as_manager()

        Class method that returns a manager.

.. _queryset-api:

QuerySet API
============

Methods that return new querysets follow.

``filter()``
~~~~~~~~~~~~

.. method:: filter(*args, **kwargs)

Returns a new ``QuerySet`` containing objects that match.

``exclude()``
~~~~~~~~~~~~~

Returns a new ``QuerySet`` containing objects that do *not* match.
"""
CHECKLIST = """\
Deployment checklist
====================

Intro.

Critical settings
-----------------

:setting:`SECRET_KEY`
~~~~~~~~~~~~~~~~~~~~~

Keep it secret.

:mod:`django.contrib.admin`
~~~~~~~~~~~~~~~~~~~~~~~~~~~

Protect the admin.
"""


@pytest.fixture
def sphinx(tmp_path):
    return write(
        tmp_path / "docs",
        {
            "conf.py": SPHINX_CONF,
            "_ext/djangodocs.py": EXTENSION,
            "contents.txt": "Contents\n========\n\n.. toctree::\n",
            "ref/settings.txt": SETTINGS,
            "ref/models/querysets.txt": QUERYSETS,
            "howto/checklist.txt": CHECKLIST,
            "requirements.txt": "Sphinx>=4\n",
            "_theme/page.html": "<h1>Theme</h1><p>x</p>\n",
            "README.rst": "Readme\n======\n\nx\n",
            "_build/html/index.txt": "Built\n=====\n\nx\n",
        },
    )


def test_a_sphinx_folder_is_read_as_sphinx_reads_it_with_no_flags(sphinx):
    project, sections = split_project(sphinx)
    assert project.kind == "sphinx"
    assert {s.path for s in sections} == {
        "contents.txt",
        "ref/settings.txt",
        "ref/models/querysets.txt",
        "howto/checklist.txt",
    }
    assert "setting" in project.domain.crossref_types and project.domain.object_types == {"django-admin": True}
    ids = {s.id: s.text for s in sections}
    # A target above a heading anchors it as Sphinx does (its Target directive: `std-<type>-<name>`); the settings page keeps its intro.
    assert ids["ref/settings.txt#std-setting-SECRET_KEY"].endswith("A secret key for a particular Django installation.")
    assert ids["ref/settings.txt#std-setting-SECRET_KEY"].startswith(".. setting:: SECRET_KEY")
    assert ids["ref/settings.txt"] == "Intro to the settings."  # currentmodule renders nothing
    # Roles resolved as Sphinx shows them: the anchor Sphinx gives the heading.
    assert {"howto/checklist.txt#secret-key", "howto/checklist.txt#django-contrib-admin"} <= set(ids)


def test_every_heading_with_text_is_a_section_and_object_descriptions_are_their_own(sphinx):
    ids = {s.id: s.text for s in split_tree(sphinx)}
    page = "ref/models/querysets.txt"
    # The parent's introduction is its own section (the label above it wins); sub-headings are theirs.
    assert ids[f"{page}#queryset-api"] == ".. _queryset-api:\n\nMethods that return new querysets follow."
    assert ids[f"{page}#filter"].startswith(".. method:: filter(*args, **kwargs)\n\nReturns a new")
    assert ids[f"{page}#exclude"] == "Returns a new ``QuerySet`` containing objects that do *not* match."
    # Objects with content of their own, anchored by their full name; nested ones cut out of the class.
    assert (
        ids[f"{page}#django.db.models.query.QuerySet"]
        == ".. class:: QuerySet(model=None)\n\n    Usually you chain filters."
    )
    assert ids[f"{page}#django.db.models.query.QuerySet.ordered"].endswith("``True`` if the ``QuerySet`` is ordered.")
    assert f"{page}#django.db.models.query.QuerySet.as_manager" in ids
    assert ids[page] == "This document describes the ``QuerySet`` API."


def test_a_heading_moved_under_a_new_parent_keeps_its_id_and_text(tmp_path):
    before = write(
        tmp_path / "a", {"p.rst": "Page\n====\n\nIntro.\n\nSpelling check\n--------------\n\nRun the checker.\n"}
    )
    after = write(
        tmp_path / "b",
        {
            "p.rst": "Page\n====\n\nIntro.\n\nQuality\n-------\n\nSeveral checks.\n\n"
            "Spelling check\n~~~~~~~~~~~~~~\n\nRun the checker.\n"
        },
    )
    old, new = {s.id: s.text for s in split_tree(before)}, {s.id: s.text for s in split_tree(after)}
    assert old["p.rst#spelling-check"] == new["p.rst#spelling-check"] == "Run the checker."
    assert new["p.rst#quality"] == "Several checks."


def test_a_directive_that_shows_something_stays_in_the_section_above_the_next_heading(tmp_path):
    # A note closing a section (flask's config.rst), a project's own directives (pip's command pages):
    # shown where they stand, so their section's, never a lead-in of the heading below as a label is.
    page = (
        "Config\n======\n\nValues\n------\n\nThe values.\n\n.. versionadded:: 3.10\n\n"
        ".. _python-files:\n\nPython files\n------------\n\nFrom a file.\n\n"
        'Usage\n-----\n\n.. tab:: Windows\n\n   .. pip-command-usage:: freeze "py -m pip"\n\n'
        "Description\n-----------\n\n.. pip-command-description:: freeze\n\n"
        "Options\n-------\n\n.. pip-command-options:: freeze\n\n"
        ".. index:: examples\n\nExamples\n--------\n\nRun it.\n"
    )
    sections = {s.id: s.text for s in split_tree(write(tmp_path, {"p.rst": page}))}
    assert sections == {
        "p.rst#values": "The values.\n\n.. versionadded:: 3.10",
        "p.rst#python-files": ".. _python-files:\n\nFrom a file.",
        "p.rst#usage": '.. tab:: Windows\n\n   .. pip-command-usage:: freeze "py -m pip"',
        "p.rst#description": ".. pip-command-description:: freeze",
        "p.rst#options": ".. pip-command-options:: freeze",
        "p.rst#examples": ".. index:: examples\n\nRun it.",
    }


def test_a_section_of_only_labels_rules_or_comments_is_no_section(tmp_path):
    # Cited, it would be served empty: pip's label-only command pages, httpx's `---` and comment-only sections.
    rst = write(
        tmp_path / "rst",
        {"cache.rst": ".. _`pip cache`:\n\n=========\npip cache\n=========\n\nUsage\n=====\n\nRun it.\n"},
    )
    folder = write(
        tmp_path / "md",
        {
            "proxies.md": "# Troubleshooting\n\nRead on.\n\n## Proxies\n\n---\n\n## Plugins\n\n<!-- none yet -->\n\n## Last\n\nText.\n",
        },
    )
    assert {s.id for s in split_tree(folder, fmt="markdown") if s.id.startswith("proxies")} == {
        "proxies.md",
        "proxies.md#last",
    }
    assert {s.id for s in split_tree(rst)} == {"cache.rst#usage"}
    # One-line comments show nothing; an indented code line showing a comment does, as a module's content.
    (rst / "cache.rst").write_text(
        "Cache\n=====\n\nTodo\n----\n\n.. TODO: write this\n\nModule\n------\n\n"
        ".. module:: mypkg\n\n   Never call mypkg.explode().\n"
    )
    sections = {s.id: s.text for s in split_tree(rst)}
    assert "cache.rst#todo" not in sections and "Never call mypkg.explode()." in sections["cache.rst#module"]
    (folder / "proxies.md").write_text("# P\n\nRead on.\n\n## Code\n\n    <!-- shown as code -->\n")
    assert split_tree(folder, fmt="markdown")[-1].text == "    <!-- shown as code -->"


def test_a_page_keeps_its_opening_id_whatever_the_levels_of_the_headings_after_it(tmp_path):
    page = "Field reference\n===============\n\nAll fields.\n\nField options\n-------------\n\nOptions.\n\n"
    folder = write(tmp_path, {"fields.rst": page + "Field API reference\n===================\n\nThe API.\n"})
    two_top_level = {s.id: s.text for s in split_tree(folder)}
    assert two_top_level == {
        "fields.rst": "All fields.",
        "fields.rst#field-options": "Options.",
        "fields.rst#field-api-reference": "The API.",
    }
    (folder / "fields.rst").write_text(page + "Field API reference\n-------------------\n\nThe API.\n")
    assert {s.id: s.text for s in split_tree(folder)} == two_top_level
    (folder / "page.md").write_text("# Exceptions\n\nWhat is raised.\n\n# Handling\n\nCatch them.\n")
    assert {s.id for s in split_tree(folder, fmt="markdown")} == {"page.md", "page.md#handling"}
    (folder / "page.md").write_text("# Exceptions\n\nWhat is raised.\n\n## Handling\n\nCatch them.\n")
    assert {s.id for s in split_tree(folder, fmt="markdown")} == {"page.md", "page.md#handling"}
    # A page opening with `##` has no title: one added above later moves no id.
    (folder / "page.md").write_text("## Raising\n\nWhat is raised.\n\n## Handling\n\nCatch them.\n")
    assert {s.id for s in split_tree(folder, fmt="markdown")} == {"page.md#raising", "page.md#handling"}
    (folder / "page.md").write_text("# Errors\n\n## Raising\n\nWhat is raised.\n\n## Handling\n\nCatch them.\n")
    assert {s.id for s in split_tree(folder, fmt="markdown")} == {"page.md#raising", "page.md#handling"}


def test_an_included_file_is_part_of_the_sections_that_include_it(tmp_path):
    folder = write(
        tmp_path / "docs",
        {
            "conf.py": "",
            "page.rst": "Page\n====\n\nIntro.\n\nShared\n------\n\n.. include:: _shared/note.inc\n",
            "_shared/note.inc": "Visiting ends at 20:00.\n",
        },
    )
    assert {s.id: s.text for s in split_tree(folder)}["page.rst#shared"] == "Visiting ends at 20:00."
    (folder / "_shared/note.inc").write_text("Visiting ends at 18:00.\n")
    assert {s.id: s.text for s in split_tree(folder)}["page.rst#shared"] == "Visiting ends at 18:00."
    write(folder, {"page.rst": "Page\n====\n\n.. include:: ../../secret.txt\n"})
    (tmp_path / "secret.txt").write_text("secret")
    with pytest.raises(SplitError, match="where includes may read"):
        split_tree(folder)


def test_a_symbolic_link_leaving_the_folder_is_refused(tmp_path):
    folder = write(tmp_path / "docs", {"a.md": "# A\n\ntext\n"})
    (tmp_path / "hostname").write_text("db-7.internal\n")
    os.symlink(tmp_path / "hostname", folder / "leak.md")
    with pytest.raises(SplitError, match="leak.md: a symbolic link to .* outside the synced folder: refused"):
        split_tree(folder)
    os.remove(folder / "leak.md")
    os.symlink(folder / "a.md", folder / "same.md")  # inside the folder: read like any page
    assert {s.path for s in split_tree(folder)} == {"a.md", "same.md"}
    os.symlink(tmp_path, folder / "up")
    with pytest.raises(SplitError, match="up: a symbolic link"):
        split_tree(folder)


MKDOCS = """\
site_name: Ward
docs_dir: pages
exclude_docs: |
  drafts/
markdown_extensions:
  - attr_list
  - pymdownx.emoji:
      emoji_index: !!python/name:material.extensions.emoji.twemoji
"""


@pytest.mark.parametrize("point_at", ["project", "docs_dir"])
def test_an_mkdocs_project_is_read_as_mkdocs_reads_it(tmp_path, point_at):
    root = write(
        tmp_path / "site",
        {
            "mkdocs.yml": MKDOCS,
            "README.md": "# Not a page\n\nx\n",
            "pages/index.md": "# Ward\n\nWelcome.\n\n## What's open? {#open}\n\nAll day.\n\n## ICU `hours`\n\n14:00.\n\n## ICU hours\n\nAgain.\n",
            "pages/drafts/wip.md": "# WIP\n\nx\n",
            "pages/.hidden.md": "# H\n\nx\n",
        },
    )
    project, sections = split_project(root if point_at == "project" else root / "pages")
    assert project.kind == "mkdocs"
    assert {s.id: s.text for s in sections} == {
        "index.md": "Welcome.",
        "index.md#open": "All day.",
        "index.md#icu-hours": "14:00.",
        "index.md#icu-hours_1": "Again.",
    }


@pytest.mark.parametrize("enabling", ["extra", "markdown.extensions.extra", "pymdownx.extra"])
def test_attr_list_enabled_through_an_extra_bundle_gives_the_heading_its_id(tmp_path, enabling):
    # pydantic's docs enable attr_list through pymdownx.extra: `{#type-hints}` is the built anchor.
    root = write(
        tmp_path,
        {
            "mkdocs.yml": f"site_name: S\nmarkdown_extensions:\n  - {enabling}\n",
            "docs/why.md": "# Why\n\nBecause.\n\n## Type hints powering validation {#type-hints}\n\nHints.\n",
        },
    )
    assert {s.id for s in split_project(root)[1]} == {"why.md", "why.md#type-hints"}
    (root / "docs" / "why.md").write_text('# Why\n\nBecause.\n\n## Hints {id=""}\n\nHints.\n')
    assert {s.id for s in split_project(root)[1]} == {"why.md", "why.md#hints"}  # an empty id is none


def test_a_section_longer_than_a_prefetch_is_cut_at_paragraphs(tmp_path):
    paragraphs = [f"Paragraph {n}: " + "visiting rules apply " * 60 for n in range(12)]
    folder = write(tmp_path, {"long.md": "# Long\n\n## Rules\n\n" + "\n\n".join(paragraphs) + "\n"})
    sections = split_tree(folder)
    ids = [s.id for s in sections]
    # Later pieces are named by their first line, so an edit elsewhere leaves their ids.
    assert ids[0] == "long.md#rules" and len(ids) >= 2
    assert all(re.fullmatch(r"long\.md#rules~[0-9a-f]{6}", i) for i in ids[1:])
    assert all(s.anchor == "rules" for s in sections[1:])  # where a piece's link goes
    assert all(count_tokens(s.text) <= 2000 for s in sections)
    assert "\n\n".join(s.text for s in sections) == "\n\n".join(paragraphs)
    assert len(split_tree(folder, max_tokens=0)) == 1


def test_include_and_exclude_globs_narrow_a_plain_folder(tmp_path):
    folder = write(
        tmp_path,
        {
            "a/one.md": "# One\n\nx\n",
            "a/two.md": "# Two\n\nx\n",
            "b/three.md": "# Three\n\nx\n",
            "theme/page.html": "<h1>T</h1><p>x</p>\n",
        },
    )
    with pytest.raises(SplitError, match="mixed formats"):
        split_tree(folder)
    assert {s.path for s in split_tree(folder, exclude=["theme"])} == {"a/one.md", "a/two.md", "b/three.md"}
    assert {s.path for s in split_tree(folder, include=["a/**"], exclude=["**/two.md"])} == {"a/one.md"}


def test_a_sync_never_reads_past_the_boundary_it_declares(tmp_path):
    """docs_dir pointing out of the project, and an include of a hidden file (one the page walk
    skips), are refused naming the file."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "keys.md").write_text("# Keys\n\nroot password\n")
    site = write(
        tmp_path / "site", {"mkdocs.yml": "site_name: Ward\ndocs_dir: ../secret\n", "docs/index.md": "# Ward\n\nx\n"}
    )
    with pytest.raises(SplitError, match="docs_dir '../secret' lies outside the project's folder"):
        split_project(site)
    folder = write(
        tmp_path / "docs", {"conf.py": "", "page.rst": "Page\n====\n\n.. include:: .env\n", ".env": "SECRET=1\n"}
    )
    with pytest.raises(SplitError, match="a hidden file the sync never reads"):
        split_tree(folder)


def test_a_page_with_two_top_level_headings_keeps_both(tmp_path):
    folder = write(
        tmp_path,
        {
            "fields.rst": "Field reference\n===============\n\nAll fields.\n\n"
            "Field options\n-------------\n\nOptions.\n\nField API reference\n===================\n\nThe API.\n"
        },
    )
    # The first heading is the page's title: its section is the page itself.
    assert {s.id: s.text for s in split_tree(folder)} == {
        "fields.rst": "All fields.",
        "fields.rst#field-options": "Options.",
        "fields.rst#field-api-reference": "The API.",
    }
