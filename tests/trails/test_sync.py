"""Keeping a scope's sections in step with its documents (issue 30): the Python FAQ at v3.6.0
and v3.11.0, turned back into reStructuredText pages, synced old -> new."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scopes.models import Scope, Section, SectionSync
from scopes.splitting import split_tree
from trails.models import Trail
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record

FAQ = Path(__file__).resolve().parents[2] / "scopes" / "fixtures" / "python-faq"


def faq_rows(revision: str) -> list[dict]:
    return [json.loads(line) for line in (FAQ / f"sections-{revision}.jsonl").read_text().splitlines()]


def write_faq_pages(revision: str, folder: Path) -> list[dict]:
    """The FAQ's entries back as rst pages: a page title per file, an entry heading per row."""
    rows = faq_rows(revision)
    pages: dict[str, list[dict]] = collections.OrderedDict()
    for row in rows:
        pages.setdefault(row["source"], []).append(row)
    for source, entries in pages.items():
        name = Path(source).stem
        lines = ["*" * (len(name) + 4), f"{name.title()} FAQ", "*" * (len(name) + 4), ""]
        for row in entries:
            lines += [row["title"], "=" * max(len(row["title"]), 3), "", row["text"], ""]
        target = folder / source
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows


def sync(folder: Path, *args: str) -> dict:
    out = __import__("io").StringIO()
    call_command("sync_sections", str(folder), "--scope", "faq", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def faq(db, tmp_path):
    Scope.objects.create(slug="faq", matcher="lexical")
    old, new = tmp_path / "old", tmp_path / "new"
    return old, new, write_faq_pages("old", old), write_faq_pages("new", new)


def test_the_rst_pages_split_into_sphinx_anchored_sections_losing_no_line(faq):
    from scopes.splitting.anchors import docutils_id

    old, new, old_rows, new_rows = faq
    for folder, rows in ((old, old_rows), (new, new_rows)):
        made = split_tree(folder)
        ids = {s.id for s in made}
        # Each entry is found by the anchor Sphinx gives its heading: the FAQ's own id wherever
        # the two agree (all but the headings with a "+", which docutils drops).
        for row in rows:
            anchor = docutils_id(" ".join(row["title"].replace("``", "").split()))
            assert f"{row['source']}#{anchor}" in ids or f"{row['source']}#{anchor}-2" in ids, row["title"]
            assert (row["id"] in ids) == ("+" not in row["title"]), row["title"]
        # No line is lost or said twice: the pages' text is the sections' text.
        by_page = collections.defaultdict(list)
        for section in made:
            by_page[section.path].append(section.text)
        for source in {r["source"] for r in rows}:
            written = (folder / source).read_text().split("\n")
            underline = [len(line) >= 3 and len(set(line)) == 1 and line[0] in "=-~^*" for line in written] + [False]
            body = [
                line
                for n, line in enumerate(written)
                if n >= 4 and line.strip() and not underline[n] and not underline[n + 1]
            ]
            said = [line for text in by_page[source] for line in text.split("\n") if line.strip()]
            assert sorted(said) == sorted(body)
        same = sum(1 for r in rows if any(s.id == r["id"] and s.text == r["text"] for s in made))
        assert same >= len(rows) - 15  # the rest: an index directive moved to the heading below it, or sub-headings


def test_a_docs_release_counts_what_really_differs_moves_trails_as_recall_says_and_reruns_as_a_no_op(faq):
    old, new, old_rows, new_rows = faq
    scope = Scope.objects.get(slug="faq")
    old_texts, new_texts = {s.id: s.text for s in split_tree(old)}, {s.id: s.text for s in split_tree(new)}
    first = sync(old)
    assert first["sections"] == {"added": len(old_texts), "changed": 0, "unchanged": 0, "removed": 0, "missing": 0}
    # Served trails on the old revision: each cites its own entry and, every third, the next one too.
    kept = [r for r in old_rows if r["id"] in old_texts]
    for index, row in enumerate(kept[:60]):
        cited = [row["id"]] + ([kept[index + 1]["id"]] if index % 3 == 0 else [])
        record(scope, RecordInput(query=row["title"], cited=cited, signal="accepted"))
    before = {t.query: recall(scope, t.query, dry_run=True).outcome.value for t in Trail.objects.filter(scope=scope)}
    assert set(before.values()) == {"prefetch"}

    previewed = sync(new, "--delete-missing", "--dry-run")
    # A dry run writes nothing: no section, no release.
    assert Section.objects.filter(scope=scope).count() == len(old_texts) and SectionSync.objects.count() == 1
    released = sync(new, "--delete-missing")
    expected = {
        "added": len(new_texts.keys() - old_texts.keys()),
        "changed": sum(1 for k in new_texts.keys() & old_texts.keys() if new_texts[k] != old_texts[k]),
        "unchanged": sum(1 for k in new_texts.keys() & old_texts.keys() if new_texts[k] == old_texts[k]),
        "removed": len(old_texts.keys() - new_texts.keys()),
        "missing": 0,
    }
    assert released["sections"] == expected == previewed["sections"]
    assert min(expected["added"], expected["changed"], expected["unchanged"], expected["removed"]) > 0
    assert released["trails"] == previewed["trails"]
    assert {s.section_id: s.text for s in Section.objects.filter(scope=scope)} == new_texts

    after = {q: recall(scope, q, dry_run=True).outcome.value for q in before}
    touched = {k for k in old_texts if k not in new_texts or new_texts[k] != old_texts[k]}
    moves = collections.Counter()
    for trail in Trail.objects.filter(scope=scope, query__in=list(before)):
        if {c.section_id for c in trail.citations.all()} & touched:
            was, now = before[trail.query], after[trail.query].replace("miss", "stale")
            moves["unaffected" if was == now else f"{was} → {now}"] += 1
    assert released["trails"]["prefetch → hint"] == moves["prefetch → hint"] > 0
    assert released["trails"]["prefetch → stale"] == moves["prefetch → stale"] > 0
    assert sum(released["trails"].values()) == sum(moves.values())
    release = SectionSync.objects.get(scope=scope, pk=released["sync_id"])
    assert release.summary["sections"] == expected and release.by == "command"

    again = sync(new, "--delete-missing")
    assert again["sections"] == {"added": 0, "changed": 0, "unchanged": len(new_texts), "removed": 0, "missing": 0}
    assert again["sync_id"] is None and SectionSync.objects.count() == 2  # the first sync, and this one


def test_sections_the_source_dropped_are_kept_without_delete_missing(faq):
    old, new, *_ = faq
    sync(old)
    old_ids, new_ids = {s.id for s in split_tree(old)}, {s.id for s in split_tree(new)}
    # Served trails citing sections the new release drops, and one citing a section it keeps.
    scope = Scope.objects.get(slug="faq")
    dropped, staying = sorted(old_ids - new_ids), sorted(old_ids & new_ids)
    for index, section_id in enumerate(dropped[:3]):
        record(scope, RecordInput(query=f"dropped question {index}", cited=[section_id], signal="accepted"))
    record(scope, RecordInput(query="a question on what stays", cited=[staying[0]], signal="accepted"))
    kept = sync(new)
    assert kept["sections"]["removed"] == 0 and kept["sections"]["missing"] == len(old_ids - new_ids) > 0
    assert Section.objects.filter(scope__slug="faq").count() == len(old_ids | new_ids)
    # The removed text is still prefetched, and the summary says so rather than hide it.
    assert recall(scope, "dropped question 0", dry_run=True).outcome.value == "prefetch"
    assert kept["trails_citing_missing"] == min(3, len(dropped))
    out = __import__("io").StringIO()
    call_command("sync_sections", str(new), "--scope", "faq", "--dry-run", stdout=out)
    assert f"{min(3, len(dropped))} served trails still cite sections in the store only" in out.getvalue()
    assert sync(new, "--delete-missing")["trails_citing_missing"] == 0


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_markdown_reads_front_matter_as_metadata_keeps_code_and_a_hash_line_in_code_is_no_heading(tmp_path):
    write(
        tmp_path,
        "guide/visiting.md",
        "---\ntitle: Visiting\n---\n\nIntro text.\n\n## ICU hours\n\n14:00 to 16:00.\n\n"
        "```sh\n# not a heading\necho hi\n```\n\n## Ward hours\n\n10:00 to 20:00.\n\n## Ward hours\n\nAgain.\n",
    )
    sections = {s.id: s.text for s in split_tree(tmp_path)}
    assert sections == {
        "guide/visiting.md": "Intro text.",  # the front matter is the page's metadata
        "guide/visiting.md#icu-hours": "14:00 to 16:00.\n\n```sh\n# not a heading\necho hi\n```",
        "guide/visiting.md#ward-hours": "10:00 to 20:00.",
        "guide/visiting.md#ward-hours_1": "Again.",  # as MkDocs anchors a repeat
    }


def test_html_headings_by_their_ids_or_text(tmp_path):
    write(
        tmp_path,
        "a.html",
        '<html><body>\n<h1>Visiting</h1>\n<h2 id="icu">ICU <em>hours</em></h2>\n<p>14:00 to 16:00.</p>\n'
        "<h2>Ward hours</h2>\n<pre>\n&lt;h2&gt;not one&lt;/h2&gt;\n</pre>\n</body></html>\n",
    )
    sections = {s.id: s.text for s in split_tree(tmp_path)}
    assert set(sections) == {"a.html#icu", "a.html#ward-hours"} and sections["a.html#icu"] == "<p>14:00 to 16:00.</p>"


@pytest.mark.parametrize(
    "files, fmt, message",
    [
        (
            {"a.jsonl": '{"id": "a\\nb", "text": "x"}\n'},
            "auto",
            "a.jsonl:1: the id 'a\\nb' holds the control character",
        ),
        ({"a.md": "## A\n\ntext\n\n## " + "x" * 600 + "\n\ntext\n"}, "auto", "a.md:5: the id"),
        ({"a.md": "# A\n\ntext\n", "b.rst": "B\n=\n\ntext\n"}, "auto", "mixed formats (markdown, rst): pass --format"),
        ({"a.md": b"\xff\xfe not utf-8"}, "auto", "a.md: cannot be read as UTF-8"),
        ({"s.jsonl": '{"id": "a", "text": "x"}\n{"id": "b"}\n'}, "auto", "s.jsonl:2: each row needs"),
    ],
)
def test_bad_sources_are_refused_naming_the_file_and_line_and_nothing_is_written(db, tmp_path, files, fmt, message):
    scope = Scope.objects.create(slug="faq", matcher="lexical")
    Section.upsert(scope, {"kept": "untouched"})
    for name, content in files.items():
        path = tmp_path / "docs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    with pytest.raises(CommandError, match=__import__("re").escape(message)):
        call_command("sync_sections", str(tmp_path / "docs"), "--scope", "faq", "--delete-missing", "--format", fmt)
    assert list(Section.objects.filter(scope=scope).values_list("section_id", "text")) == [("kept", "untouched")]
    assert not SectionSync.objects.exists()


def test_a_failure_inside_the_sync_writes_nothing(faq, monkeypatch):
    old, new, *_ = faq
    sync(old)
    from trails.upkeep import sync as sync_module

    def fail(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(sync_module.SectionSync.objects, "create", fail)
    with pytest.raises(RuntimeError):
        sync(new, "--delete-missing")
    assert Section.objects.filter(scope__slug="faq").count() == len(split_tree(old))
    assert not Section.objects.filter(scope__slug="faq", section_id__contains="in-cpython").exists()


def test_ci_syncs_through_the_api_with_the_same_summary(api, scope, other_api):
    body = {
        "sections": [{"id": "visiting/icu", "text": "ICU: 14:00 to 16:00."}, {"id": "parking", "text": "Car park B."}],
        "source": "docs@abc123",
    }
    first = api.call("post", "/scopes/hospital/section-syncs", body)
    assert first.status_code == 200 and first.json()["sections"]["added"] == 2
    body["sections"][0]["text"] = "ICU: 15:00 to 17:00."
    preview = api.call("post", "/scopes/hospital/section-syncs", {**body, "dry_run": True, "delete_missing": True})
    assert preview.json()["sections"] == {"added": 0, "changed": 1, "unchanged": 1, "removed": 0, "missing": 0}
    assert Section.objects.get(scope=scope, section_id="visiting/icu").text == "ICU: 14:00 to 16:00."
    twice = api.call(
        "post", "/scopes/hospital/section-syncs", {"sections": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}
    )
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "sections"
    hashes_only = api.call("post", "/scopes/hospital/section-syncs", {"sections": [{"id": "a", "hash": "0" * 64}]})
    assert hashes_only.status_code == 422 and hashes_only.json()["error"]["field"] == "sections"
    assert other_api.call("post", "/scopes/hospital/section-syncs", body).status_code == 404
    assert SectionSync.objects.get().source == "docs@abc123"


def test_a_hashes_only_scope_keeps_no_text_and_a_prefetch_names_the_sections_and_hashes(db, tmp_path, api):
    from infra.hashing import section_hash
    from scopes.models import ApiKey

    scope = Scope.objects.create(slug="private", matcher="lexical", keeps_text=False)
    key = ApiKey.issue([scope])[1]
    from tests.conftest import ApiClient

    private = ApiClient(key)
    icu, ward = "ICU visiting: 14:00 to 16:00.", "Ward visiting: 10:00 to 20:00."
    manifest = {
        "sections": [
            {"id": "visiting/icu", "hash": section_hash(icu)},
            {"id": "visiting/ward", "hash": section_hash(ward)},
        ]
    }
    synced = private.call("post", "/scopes/private/section-syncs", manifest)
    assert synced.status_code == 200 and synced.json()["sections"]["added"] == 2
    assert set(Section.objects.filter(scope=scope).values_list("text", flat=True)) == {""}  # no text stored, ever
    refused = private.call("put", "/scopes/private/sections", {"sections": [{"id": "visiting/icu", "text": icu}]})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "hashes_only"

    recorded = private.call(
        "post",
        "/scopes/private/trails",
        {
            "query": "What are the ICU visiting hours?",
            "cited": ["visiting/icu"],
            "hashes": {"visiting/icu": section_hash(icu)},
            "signal": "accepted",
        },
    )
    assert recorded.status_code == 201, recorded.content
    served = private.call("post", "/scopes/private/recall", {"query": "What are the ICU visiting hours?"}).json()
    assert served["outcome"] == "prefetch"
    assert served["sections"] == [
        {
            "id": "visiting/icu",
            "status": "valid",
            "text": None,
            "tokens": None,
            "truncated": None,
            "hash": section_hash(icu),
        }
    ]
    # The source changes: a new manifest, and the trail is no longer served.
    changed = {
        "sections": [
            {"id": "visiting/icu", "hash": section_hash("ICU visiting is suspended.")},
            manifest["sections"][1],
        ]
    }
    moved = private.call("post", "/scopes/private/section-syncs", changed).json()
    assert moved["sections"]["changed"] == 1 and moved["trails"]["prefetch → stale"] == 1
    assert (
        private.call("post", "/scopes/private/recall", {"query": "What are the ICU visiting hours?"}).json()["outcome"]
        == "miss"
    )


def test_a_sync_that_would_remove_most_of_a_scope_is_refused_unless_meant(api, scope, sections, tmp_path):
    from io import StringIO

    only = {"sections": [{"id": "parking", "text": sections["parking"]}], "delete_missing": True}
    refused = api.call("post", "/scopes/hospital/section-syncs", only)
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "delete_missing"
    assert Section.objects.filter(scope=scope).count() == 3
    dry = api.call("post", "/scopes/hospital/section-syncs", {**only, "dry_run": True}).json()
    assert dry["sections"]["removed"] == 2 and "would remove 2 of the scope's 3 sections" in dry["refusal"]
    meant = api.call("post", "/scopes/hospital/section-syncs", {**only, "allow_removing_most": True})
    assert meant.status_code == 200 and Section.objects.filter(scope=scope).count() == 1
    # The command: a dry run that would be refused exits non-zero, and --exit-code tells CI whether anything would change.
    (tmp_path / "other.md").write_text("# Another document\n\nNothing the scope holds.\n")
    with pytest.raises(CommandError, match="would remove 1 of the scope's 1 sections"):
        call_command(
            "sync_sections", "--scope", "hospital", "--delete-missing", "--dry-run", str(tmp_path), stdout=StringIO()
        )
    with pytest.raises(SystemExit) as changes:
        call_command(
            "sync_sections", "--scope", "hospital", "--dry-run", "--exit-code", str(tmp_path), stdout=StringIO()
        )
    assert changes.value.code == 2
    call_command("sync_sections", "--scope", "hospital", str(tmp_path), stdout=StringIO())
    call_command(
        "sync_sections", "--scope", "hospital", "--dry-run", "--exit-code", str(tmp_path), stdout=StringIO()
    )  # no change: exit 0


def test_a_reverted_section_counts_its_trails_coming_back(api, scope, sections):
    api.record("hospital", query="Where do visitors park?", cited=["parking", "visiting/ward"])
    body = {
        "sections": [
            {"id": "visiting/ward", "text": sections["visiting/ward"]},
            {"id": "visiting/icu", "text": sections["visiting/icu"]},
        ],
        "delete_missing": True,
        "allow_removing_most": True,
    }
    removed = api.call("post", "/scopes/hospital/section-syncs", body).json()
    assert removed["trails"]["prefetch → hint"] == 1
    back = api.call(
        "post", "/scopes/hospital/section-syncs", {"sections": [{"id": i, "text": t} for i, t in sections.items()]}
    ).json()
    assert back["sections"]["added"] == 1 and back["trails"].get("hint → prefetch") == 1


def test_docs_ci_sends_a_release_gzipped_with_hashes_for_what_did_not_change(api, scope, sections, settings):
    import gzip

    from infra.hashing import section_hash

    api.record("hospital", query="What are the ICU visiting hours?", cited=["visiting/icu"])
    icu = "ICU visiting: 15:00 to 17:00 from Monday."
    body = {
        "sections": [{"id": "visiting/icu", "text": icu}]
        + [{"id": i, "hash": section_hash(t)} for i, t in sections.items() if i != "visiting/icu"],
        "list_all": True,
    }
    packed = gzip.compress(json.dumps(body).encode())
    answer = api.client.post(
        "/api/v1/scopes/hospital/section-syncs",
        data=packed,
        content_type="application/json",
        headers={**api.headers, "Content-Encoding": "gzip"},
    )
    assert answer.status_code == 200, answer.content
    summary = answer.json()
    assert summary["sections"] == {"added": 0, "changed": 1, "unchanged": 2, "removed": 0, "missing": 0}
    trail = Trail.objects.get(scope=scope)
    assert summary["moved_trails"] == {"prefetch → stale": [str(trail.public_id)]} and summary["ids_complete"]
    assert Section.objects.get(scope=scope, section_id="visiting/icu").text == icu

    # Limits are named, for the body as sent and as unpacked; a bomb is stopped at the limit.
    settings.RAGTRAIL_MAX_SYNC_BODY_BYTES = 10_000
    bomb = gzip.compress(json.dumps({"sections": [{"id": "x", "text": "a" * 50_000}]}).encode())
    refused = api.client.post(
        "/api/v1/scopes/hospital/section-syncs",
        data=bomb,
        content_type="application/json",
        headers={**api.headers, "Content-Encoding": "gzip"},
    )
    assert refused.status_code == 413 and "10,000 bytes" in refused.json()["error"]["message"]
    assert "RAGTRAIL_MAX_SYNC_BODY_BYTES" in refused.json()["error"]["message"]
    big = api.call("post", "/scopes/hospital/section-syncs", {"sections": [{"id": "x", "text": "a" * 20_000}]})
    assert big.status_code == 413 and "(unpacked)" not in big.json()["error"]["message"]
    brotli = api.client.post(
        "/api/v1/scopes/hospital/section-syncs",
        data=b"x",
        content_type="application/json",
        headers={**api.headers, "Content-Encoding": "br"},
    )
    assert brotli.status_code == 415 and brotli.json()["error"]["field"] == "Content-Encoding"
    assert Section.objects.get(scope=scope, section_id="visiting/icu").text == icu


def test_a_section_id_with_a_control_character_is_refused_everywhere(api, scope):
    for path, body in (
        ("/scopes/hospital/section-syncs", {"sections": [{"id": "a\nb", "text": "x"}]}),
        ("/scopes/hospital/sections", {"sections": [{"id": "a\u0007b", "text": "x"}]}),
    ):
        method = "post" if path.endswith("syncs") else "put"
        refused = api.call(method, path, body)
        assert refused.status_code == 422 and refused.json()["error"]["field"].startswith("sections"), refused.content
    assert not Section.objects.filter(scope=scope).exists()


def test_a_large_release_runs_as_a_job_with_a_status_url(
    api, scope, sections, monkeypatch, other_api, committed, settings
):
    from scopes.models import SectionSyncJob
    from trails import tasks
    from trails.upkeep.sync import run_sync_job

    queued = []
    monkeypatch.setattr(tasks.sync_job_task, "delay", lambda job_id: queued.append(job_id))
    body = {
        "sections": [{"id": i, "text": t + " (revised)"} for i, t in sections.items()],
        "background": True,
        "source": "docs@def456",
    }
    with committed():
        accepted = api.call("post", "/scopes/hospital/section-syncs", body)
    assert accepted.status_code == 202, accepted.content
    job = accepted.json()
    assert job["state"] == "queued" and queued == [SectionSyncJob.objects.get().pk]
    assert Section.objects.get(scope=scope, section_id="parking").text == sections["parking"]  # nothing yet
    assert other_api.call("get", job["status_url"][len("/api/v1") :]).status_code == 404  # another scope's key
    run_sync_job(queued[0])
    run_sync_job(queued[0])  # a second delivery finds it done
    done = api.call("get", job["status_url"][len("/api/v1") :]).json()
    assert done["state"] == "done" and done["summary"]["sections"]["changed"] == 3 and done["finished_at"]
    assert Section.objects.get(scope=scope, section_id="parking").text == sections["parking"] + " (revised)"
    assert SectionSyncJob.objects.get().request == {}  # the texts live in the section store only
    # Past the inline limit a sync is a job whether asked or not.
    settings.RAGTRAIL_SYNC_INLINE_SECTIONS = 2
    with committed():
        large = api.call("post", "/scopes/hospital/section-syncs", {"sections": body["sections"]})
    assert large.status_code == 202 and len(queued) == 2
    settings.RAGTRAIL_SYNC_INLINE_SECTIONS = 10_000
    # A job that is refused says why, as the API would have.
    with committed():
        refused = api.call(
            "post",
            "/scopes/hospital/section-syncs",
            {"sections": [{"id": "parking", "hash": "0" * 64}], "background": True, "delete_missing": True},
        ).json()
    run_sync_job(queued[-1])
    failed = api.call("get", refused["status_url"][len("/api/v1") :]).json()
    assert failed["state"] == "failed" and failed["error"]["field"] == "delete_missing"


@pytest.mark.django_db(transaction=True)
def test_a_second_sync_of_a_scope_waits_then_answers_409_never_503(api, scope, sections, monkeypatch):
    from django.db import connection, connections

    from trails.upkeep import sync as sync_module

    if connection.vendor != "postgresql":
        pytest.skip("the sync lock is PostgreSQL's advisory lock")
    monkeypatch.setattr(sync_module, "SYNC_WAIT_SECONDS", 0.3)
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [sync_module.SYNC_LOCK, scope.pk])
            body = {"sections": [{"id": i, "text": t + "!"} for i, t in sections.items()]}
            busy = api.call("post", "/scopes/hospital/section-syncs", body)
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "sync_running", busy.content
            cursor.execute("ROLLBACK")
    finally:
        holder.close()
    assert api.call("post", "/scopes/hospital/section-syncs", body).status_code == 200


def test_the_syncs_page_names_the_trails_a_release_moved_and_filters_to_cited_sections(
    api, scope, sections, django_user_model
):
    from django.test import Client

    from tests.conftest import grant

    api.record("hospital", query="What are the ICU visiting hours?", cited=["visiting/icu"])
    body = {"sections": [{"id": i, "text": t + " (revised)"} for i, t in sections.items()], "source": "docs@abc"}
    assert api.call("post", "/scopes/hospital/section-syncs", body).json()["trails"]["prefetch → stale"] == 1
    operator = django_user_model.objects.create_user("ann", password="x", is_staff=True)
    grant(operator, scope, access=1)
    browser = Client()
    browser.force_login(operator)
    page = browser.get("/ops/hospital/syncs/").content.decode()
    trail = Trail.objects.get(scope=scope)
    assert "Trails prefetch → stale (1)" in page and f"/ops/hospital/trails/{trail.public_id}/" in page
    assert "docs@abc" in page and "parking" in page
    cited_only = browser.get("/ops/hospital/syncs/?cited=1").content.decode()
    assert "visiting/icu" in cited_only and "<code>parking</code>" not in cited_only


def test_the_wipe_guard_counts_against_the_scope_before_recent_syncs_not_the_last_one(api, scope, sections):
    """Adding junk, then syncing only the junk with delete_missing, removed the whole scope in
    two syncs that each looked small. Settled sections (stored before the day's syncs) count."""
    from datetime import timedelta

    from django.utils import timezone

    Section.objects.filter(scope=scope).update(first_stored_at=timezone.now() - timedelta(days=3))
    junk = [{"id": f"junk/{n}", "text": f"Junk {n}."} for n in range(10)]
    assert api.call("post", "/scopes/hospital/section-syncs", {"sections": junk}).status_code == 200
    wipe = api.call("post", "/scopes/hospital/section-syncs", {"sections": junk, "delete_missing": True})
    assert (
        wipe.status_code == 422
        and "would remove 3 of the 3 sections the scope held before them" in wipe.json()["error"]["message"]
    )
    assert Section.objects.filter(scope=scope, section_id__startswith="visiting/").count() == 2
    # In steps: one settled section at a time is allowed until more than half are gone.
    keep_two = junk + [{"id": i, "text": sections[i]} for i in ("visiting/icu", "visiting/ward")]
    assert (
        api.call("post", "/scopes/hospital/section-syncs", {"sections": keep_two, "delete_missing": True}).status_code
        == 200
    )
    keep_one = junk + [{"id": "visiting/icu", "text": sections["visiting/icu"]}]
    step = api.call("post", "/scopes/hospital/section-syncs", {"sections": keep_one, "delete_missing": True})
    assert step.status_code == 422 and "would remove 2 of the 3" in step.json()["error"]["message"]
    meant = api.call(
        "post",
        "/scopes/hospital/section-syncs",
        {"sections": keep_one, "delete_missing": True, "allow_removing_most": True},
    )
    assert meant.status_code == 200


def test_a_quiet_sync_still_says_what_it_does_not_read_and_its_json_lists_it(db, tmp_path):
    Scope.objects.create(slug="faq", matcher="lexical")
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    (site / "mkdocs.yml").write_text("site_name: x\nplugins:\n  - macros\n")
    (site / "docs" / "index.md").write_text("# API\n\n## Helpers\n\n::: httpx.request\n")
    out, err = __import__("io").StringIO(), __import__("io").StringIO()
    call_command("sync_sections", str(site), "--scope", "faq", "--json", "--quiet", stdout=out, stderr=err)
    warnings = json.loads(out.getvalue())["warnings"]
    assert any(w.startswith("macros adds text at build time") for w in warnings), warnings
    assert any("`::: name` blocks are filled in from docstrings" in w for w in warnings), warnings
    assert all(f"warning: {w}" in err.getvalue() for w in warnings)
    assert "sections from" not in err.getvalue()  # quiet: no notes, no counts
