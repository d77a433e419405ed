"""evaluate_second_chance on a tiny input: both corpora, both arms through the product, the figures written."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from evaluation import second_chance as lab
from evaluation import second_chance_report as report

PAIRS = [
    ("How do I copy an object in Python?", "How can I copy an object in Python?", True),
    ("What are the ICU visiting hours?", "What are the general ward visiting hours?", False),
    ("How do I sort a list in Python?", "How to sort a list in Python?", True),
    ("Where can visitors park their cars?", "What is the capital of Peru?", False),
    ("How do I install Python on Windows?", "How do I install Python on a Windows PC?", True),
    ("Who won the first Congo war?", "Who won the second Congo war?", False),
    ("How can I copy an object in Python?", "What is the best way to copy an object in Python?", True),
    ("How do I learn to cook rice?", "How do I learn to cook pasta?", False),
    ("How to sort a list in Python?", "How do I sort a Python list?", True),
    ("What is machine learning?", "What is deep learning?", False),
    ("How do I install Python on a Windows PC?", "How can I install Python on Windows 10?", True),
    ("How do I copy an object in Python?", "How do I clone an object in Python?", True),
]


def faq_folder(tmp_path):
    folder = tmp_path / "faq"
    folder.mkdir()
    entries = [
        (
            "Doc/faq/programming.rst#how-do-i-copy-a-file",
            "How do I copy a file?",
            "Use shutil.copyfile to copy a file.",
        ),
        (
            "Doc/faq/programming.rst#how-do-i-delete-a-file",
            "How do I delete a file?",
            "Use os.remove to delete a file.",
        ),
        (
            "Doc/faq/design.rst#how-are-lists-implemented-in-cpython",
            "How are lists implemented in CPython?",
            "As arrays.",
        ),
        ("Doc/faq/general.rst#what-is-python", "What is Python?", "An interpreted programming language."),
        ("Doc/faq/library.rst#how-do-i-send-mail", "How do I send mail?", "Use smtplib to send mail."),
    ]
    (folder / "sections-new.jsonl").write_text(
        "\n".join(json.dumps({"id": i, "title": t, "text": x, "source": i.split("#")[0]}) for i, t, x in entries)
    )
    questions = [{"question": t, "section_id": i, "present_in": ["old", "new"]} for i, t, _ in entries]
    questions[2]["present_in"] = ["new"]
    questions.append(
        {
            "question": "How are lists implemented?",
            "section_id": "Doc/faq/design.rst#how-are-lists-implemented",
            "present_in": ["old"],
        }
    )
    (folder / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions))
    return folder


def test_the_evaluation_runs_both_arms_on_both_corpora_and_writes_the_figures(db, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"a": a, "b": b, "duplicate": d}) for a, b, d in PAIRS))
    page = tmp_path / "page.md"
    page.write_text(f"# The second chance\n\nBefore.\n\n{report.START}\nold figures\n{report.END}\n\nAfter.\n")
    results = tmp_path / "results.json"
    out = StringIO()
    call_command(
        "evaluate_second_chance",
        "--pairs", str(pairs),
        "--faq", str(faq_folder(tmp_path)),
        "--results", str(results),
        "--page", str(page),
        "--cache", "",
        stdout=out,
    )  # fmt: skip
    text = out.getvalue()
    assert "fit splits, both corpora" in text and "chosen: margin" in text
    for corpus in ("quora", "python-faq"):
        assert f"{corpus}, held-out split" in text, text
    assert text.count("| | without | with the second chance |") == 2
    assert "On by default:" in text

    figures = json.loads(results.read_text())
    assert set(figures["corpora"]) == {"quora", "python-faq"}
    for corpus in figures["corpora"].values():
        without, with_ = corpus["held_out"]["without"], corpus["held_out"]["with"]
        assert without["questions"] == with_["questions"] > 0
        # Only the arm with second chances asks for them, and it asks after every miss it had.
        assert without["second_asked"] == 0 and without["second_serves"] == 0
        assert with_["second_asked"] == with_["misses"] > 0
        assert without["recorded"] == without["misses"]
    assert figures["choice"]["chosen"]["top"] in lab.TOPS
    assert figures["choice"]["chosen"]["margin"] in lab.MARGINS
    # The reworded heading is a paraphrase of the newer entry.
    assert figures["corpora"]["python-faq"]["notes"]["reworded"] == [
        {"asked": "How are lists implemented?", "truth": "Doc/faq/design.rst#how-are-lists-implemented-in-cpython"}
    ]

    rewritten = page.read_text()
    assert "old figures" not in rewritten and "Before." in rewritten and "After." in rewritten
    assert "On by default:" in rewritten and "| questions |" in rewritten and "| margin | top 1 |" in rewritten
    # The page's figures come from the results file alone: rewriting them from it changes nothing.
    call_command(
        "evaluate_second_chance", "--page-only", "--results", str(results), "--page", str(page), stdout=StringIO()
    )
    assert page.read_text() == rewritten


def test_quora_topics_join_duplicates_and_a_paraphrase_is_searched_without_its_own_words():
    pairs = [
        {"a": "How do I copy an object?", "b": "How can I copy an object?", "duplicate": True},
        {"a": "How can I copy an object?", "b": "What is the way to copy objects?", "duplicate": True},
        {"a": "Who won the first Congo war?", "b": "Who won the second Congo war?", "duplicate": False},
    ]
    corpus = lab.quora_corpus(pairs)
    assert corpus.notes["topics"] == 3 and corpus.notes["topics_alone"] == 2
    asked = {q.text: q for stream in corpus.streams.values() for q in stream}
    copy = asked["How can I copy an object?"]
    assert asked["How do I copy an object?"].truth == copy.truth
    assert copy.left_out == (copy.truth[0], "How can I copy an object?")
    alone = asked["Who won the second Congo war?"]
    assert alone.left_out is None and alone.truth != asked["Who won the first Congo war?"].truth


@pytest.mark.parametrize(("events", "trials", "upper"), [(0, 188, 0.02), (0, 10, 0.2775), (1, 1000, 0.0057)])
def test_wilson_upper_bounds(events, trials, upper):
    assert lab.wilson(events, trials)[1] == pytest.approx(upper, abs=0.001)
