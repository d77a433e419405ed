"""What a project's own configuration names, read as its tool reads it: MkDocs' INHERIT,
plugins in either form, include base paths (never version control's files), directive options,
and directives that render nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from scopes.splitting import SplitError, sections_of_page, split_project


def mkdocs_site(root: Path, config: str, page: str) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "mkdocs.yml").write_text(config)
    (root / "docs" / "index.md").write_text(page)
    return root


def test_an_inherited_mkdocs_config_is_deep_merged_as_mkdocs_merges_it(tmp_path):
    site = mkdocs_site(
        tmp_path / "site", "INHERIT: config/base.yml\nsite_name: x\n", "# T\n\n## Two words\n\n{!src/ex.py!}\n"
    )
    (site / "config").mkdir()
    (site / "config" / "base.yml").write_text(
        "markdown_extensions:\n  - mdx_include:\n      base_path: .\n  - toc:\n      separator: _\nplugins:\n  - macros\n"
    )
    (site / "src").mkdir()
    (site / "src" / "ex.py").write_text("print('EXAMPLE')\n")
    project, sections = split_project(site)
    assert {s.id: s.text for s in sections} == {"index.md#two_words": "print('EXAMPLE')"}
    assert any("macros adds text at build time" in note for note in project.notes)
    # The inheriting file's own keys win; a mapping is merged key by key.
    (site / "mkdocs.yml").write_text("INHERIT: config/base.yml\nsite_name: x\nplugins:\n  search: {}\n")
    assert not any("macros" in note for note in split_project(site)[0].notes)
    (site / "mkdocs.yml").write_text("INHERIT: ../outside.yml\nsite_name: x\n")
    (tmp_path / "outside.yml").write_text("site_name: y\n")
    with pytest.raises(SplitError, match="INHERIT '../outside.yml' in mkdocs.yml lies outside the repository"):
        split_project(site)


def test_plugins_written_as_a_mapping_are_checked_like_a_list(tmp_path):
    site = mkdocs_site(
        tmp_path / "site", "site_name: x\nplugins:\n  search:\n  macros:\n", "# T\n\n## Part\n\n{{ 1 + 1 }}\n"
    )
    assert any("macros adds text at build time" in note for note in split_project(site)[0].notes)


@pytest.mark.parametrize("folder", [".git", ".hg", ".svn", ".github"])
def test_a_base_path_naming_version_control_files_is_refused(tmp_path, folder):
    site = mkdocs_site(
        tmp_path / "site",
        f"site_name: x\nmarkdown_extensions:\n  - mdx_include:\n      base_path: {folder}\n",
        "# T\n\n{!config!}\n",
    )
    (site / folder).mkdir()
    (site / folder / "config").write_text("[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n")
    with pytest.raises(SplitError, match=rf"base_path {folder} is version control's own files: refused"):
        split_project(site)
    # Nor through a named folder above it, nor snippets.
    (site / "mkdocs.yml").write_text("site_name: x\nmarkdown_extensions:\n  - mdx_include:\n      base_path: .\n")
    (site / "docs" / "index.md").write_text(f"# T\n\n{{!{folder}/config!}}\n")
    with pytest.raises(SplitError, match=rf"includes {folder}/config, inside {folder} \(version control"):
        split_project(site)


def test_mdx_include_fan_out_is_refused_at_once_counting_the_whole_expansion(tmp_path, monkeypatch):
    site = mkdocs_site(
        tmp_path / "site", "site_name: x\nmarkdown_extensions:\n  - mdx_include\n", "# T\n\n{!inc/b0.md!}\n"
    )
    (site / "inc").mkdir()
    for level in range(6):
        (site / "inc" / f"b{level}.md").write_text(f"{{!inc/b{level + 1}.md!}}\n" * 10)
    (site / "inc" / "b6.md").write_text("leaf\n")
    from scopes.splitting import markdown_includes

    checks = []
    real_inside = markdown_includes.inside
    monkeypatch.setattr(markdown_includes, "inside", lambda *a, **k: checks.append(a[2]) or real_inside(*a, **k))
    with pytest.raises(SplitError, match=r"index.md:3: includes expand past 100,000 lines .*\(through inc/b0.md → "):
        split_project(site)
    assert len(checks) == len(set(checks)) <= 7  # each distinct path resolved once, each expansion reused
    # Within the budget, repeated includes are all shown.
    (site / "docs" / "index.md").write_text("# T\n\n{!inc/b4.md!}\n")
    assert split_project(site)[1][0].text.count("leaf") == 100


def test_a_file_role_opening_a_wrapped_line_is_prose_not_an_option(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text("project = 'x'\n")
    (docs / "index.rst").write_text(
        "T\n=\n\n1. the app has to be in the\n   :file:`__init__.py` file.\n\n"
        ".. csv-table:: Data\n   :header-rows: 1\n   :file: data.csv\n"
    )
    notes = [n for n in split_project(docs)[0].notes if "reads a file" in n]
    assert notes == ["warning: index.rst:9 reads a file (:file: data.csv) the sync does not read"]


def test_directives_that_render_nothing_stay_out_of_a_changelogs_sections():
    top = "Changes\n=======\n\n.. currentmodule:: flask\n\n.. default-role:: code\n\n.. highlight:: python\n\n"
    old = top + "Version 1.0\n-----------\n\n- Fixed ``x``.\n"
    new = top + "Version 1.1\n-----------\n\n- New.\n\nVersion 1.0\n-----------\n\n- Fixed ``x``.\n"
    before = {s.id: s.text for s in sections_of_page("changes.rst", old, "rst")}
    after = {s.id: s.text for s in sections_of_page("changes.rst", new, "rst")}
    assert before == {"changes.rst#version-1-0": "- Fixed ``x``."}
    assert after == {"changes.rst#version-1-1": "- New.", "changes.rst#version-1-0": "- Fixed ``x``."}


def test_text_a_build_makes_is_named_as_a_warning_never_silently_left_out(tmp_path):
    # pip's `.. pip-news-include::`, MyST added under an `if` in conf.py; httpx's `::: httpx.request`, hooks.
    (tmp_path / "pyproject.toml").write_text("")
    sphinx = tmp_path / "docs" / "html"  # as pip lays it out: its extension one folder up, in docs/
    sphinx.mkdir(parents=True)
    (sphinx / "conf.py").write_text(
        'extensions = ["pip_sphinxext"]\nif "man" not in tags:\n    extensions.extend(("myst_parser",))\n'
    )
    (tmp_path / "docs" / "pip_sphinxext.py").write_text(
        'def setup(app):\n    app.add_directive("pip-news-include", object)\n'
    )
    (sphinx / "index.rst").write_text("News\n====\n\nWhat changed.\n\n.. pip-news-include:: ../NEWS.rst\n")
    (sphinx / "guide.md").write_text("# Guide\n\nRead me.\n")
    project, sections = split_project(sphinx)
    warnings = [note for note in project.notes if note.startswith("warning:")]
    assert any(
        "`pip-news-include` is the project's own directive" in w and "(1 page, first index.rst:6)" in w
        for w in warnings
    ), project.notes
    assert any("conf.py:3 changes `extensions` in code" in w for w in warnings), project.notes
    assert {s.id for s in sections} == {"index.rst"}  # the .md page, as the sync reads conf.py: said above
    for conf in (
        'base = ["a"]\nextensions = base + ["myst_parser"]\n',
        'extensions: list[str] = ["myst_parser"]\n',
        'try:\n    extensions = ["myst_parser"]\nexcept ImportError:\n    pass\n',
        'def setup(app):\n    app.setup_extension("myst_parser")\n',
    ):
        (sphinx / "conf.py").write_text(conf)
        assert any("changes `extensions` in code" in note for note in split_project(sphinx)[0].notes), conf
    (sphinx / "conf.py").write_text('extensions = ["sphinx.ext.autodoc"]\n')
    assert not any("in code" in note for note in split_project(sphinx)[0].notes)

    site = mkdocs_site(
        tmp_path / "site",
        "site_name: x\nhooks:\n  - docs/hooks.py\n",
        "# API\n\n## Helpers\n\n::: httpx.request\n\n::: httpx.get\n",
    )
    warnings = [note for note in split_project(site)[0].notes if note.startswith("warning:")]
    assert any(
        "`::: name` blocks are filled in from docstrings" in w and "(1 page, first index.md:5)" in w for w in warnings
    )
    assert any("hooks (docs/hooks.py) run code at build time" in w for w in warnings)
