"""evaluate_second_chance's figures as markdown: each corpus' held-out arms side by side, the fit
table, and the block of docs/second-chance.md the command rewrites from its results file."""

from __future__ import annotations

from evaluation.second_chance import MARGINS, TOPS, wilson

# The figures' place in docs/second-chance.md, rewritten by the command from its results file.
START, END = "<!-- second-chance:start -->", "<!-- second-chance:end -->"
ROWS = [
    ("questions", "questions"),
    ("duplicates (an earlier question had the same truth)", "duplicates"),
    ("duplicates served right", "duplicates_right"),
    ("  of which by the second chance", "second_right_duplicates"),
    ("served wrong by the first chance", "first_wrong"),
    ("second chances asked (misses)", "second_asked"),
    ("second-chance serves", "second_serves"),
    ("  served right", "second_right"),
    ("  served wrong", "second_wrong"),
    ("    of which a trail citing the truth was recorded already", "second_wrong_duplicates"),
    ("calls saved per 100 questions", "calls_saved_per_100"),
    ("tokens saved per 100 questions", "tokens_saved_per_100"),
    ("near misses (nearest recorded question at or above the lower cut)", "near_misses"),
    ("  not read by the recall at all", "near_misses_not_read"),
]


def _interval(pair: list[float]) -> str:
    return f"[{100 * pair[0]:.1f} %, {100 * pair[1]:.1f} %]"


def table(arms: dict) -> list[str]:
    """One corpus' held-out arms side by side, as markdown lines."""
    without, with_ = arms["without"], arms["with"]
    lines = ["| | without | with the second chance |", "|---|---:|---:|"]
    for label, key in ROWS:
        if key not in with_:
            continue  # a figure the results file was written without
        left = "–" if key.startswith(("second", "near")) else without[key]
        lines.append(f"| {label} | {left} | {with_.get(key, '–')} |")
    lines.append(
        f"| duplicates served right, rate (95 % Wilson) | {100 * without['duplicates_right_rate']:.1f} % "
        f"{_interval(without['duplicates_right_wilson'])} | {100 * with_['duplicates_right_rate']:.1f} % "
        f"{_interval(with_['duplicates_right_wilson'])} |"
    )
    lines.append(
        f"| served wrong per question (95 % Wilson) | {100 * without['served_wrong_per_question']:.2f} % "
        f"{_interval(without['served_wrong_per_question_wilson'])} | {100 * with_['served_wrong_per_question']:.2f} % "
        f"{_interval(with_['served_wrong_per_question_wilson'])} |"
    )
    if "served_wrong_per_non_duplicate" in with_:
        lines.append(
            f"| served wrong per non-duplicate question: the scope's false-hit rate (95 % Wilson) | "
            f"{100 * without['served_wrong_per_non_duplicate']:.2f} % "
            f"{_interval(without['served_wrong_per_non_duplicate_wilson'])} | "
            f"{100 * with_['served_wrong_per_non_duplicate']:.2f} % "
            f"{_interval(with_['served_wrong_per_non_duplicate_wilson'])} |"
        )
    first = []
    for arm in (without, with_):
        serves = arm["first_right"] + arm["first_wrong"]
        bounds = list(wilson(arm["first_wrong"], serves))
        first.append(f"{100 * arm['first_wrong'] / max(1, serves):.2f} % {_interval(bounds)}")
    lines.append(f"| served wrong per first-chance serve (95 % Wilson) | {first[0]} | {first[1]} |")
    rate = with_["second_wrong_rate"]
    lines.append(
        f"| served wrong per second-chance serve (95 % Wilson) | – | "
        f"{'–' if rate is None else f'{100 * rate:.2f} %'} {_interval(with_['second_wrong_wilson'])} |"
    )
    return lines


def fit_table(rows: list[dict]) -> list[str]:
    """Second-chance serves right and wrong per margin and top on the fit splits, as markdown lines."""
    settable = [r for r in rows if r["first_cited"]]
    lines = [
        "Fit splits, both corpora, the search's first result cited: second-chance serves right / wrong "
        "(95 % Wilson upper bound of served wrong per non-duplicate question, first and second chance together)",
        "",
        "| margin | " + " | ".join(f"top {t}" for t in TOPS) + " |",
        "|---|" + "---:|" * len(TOPS),
    ]
    for margin in MARGINS:
        cells = {r["top"]: r for r in settable if r["margin"] == margin}
        lines.append(
            f"| {margin:.2f} | "
            + " | ".join(
                f"{cells[t]['right']} / {cells[t]['wrong']} ({100 * cells[t]['wrong_upper']:.1f} %)" for t in TOPS
            )
            + " |"
        )
    return lines


def render(results: dict) -> str:
    """The doc's figures: the chosen rule, the fit, and each corpus' held-out arms."""
    chosen = results["choice"]["chosen"]
    lines = [
        f"Written by `{results['command']}` ({results['at']}, commit {results['commit']}; "
        f"{results['wall_seconds']:.0f} s on {results['machine']}).",
        "",
        f"Chosen on the fit splits: **margin {chosen['margin']:.2f}, top {chosen['top']}** — "
        f"{chosen['right']} second-chance serves right and {chosen['wrong']} wrong of {chosen['serves']}, "
        f"95 % Wilson upper bound of served wrong per non-duplicate question {100 * chosen['wrong_upper']:.2f} % "
        f"(the first chance alone: {100 * results['choice']['first_chance_wrong_upper']:.2f} %; "
        f"bound {100 * results['bound']:.0f} %: {'within' if chosen['holds'] else 'NOT within'}).",
        "",
    ]
    lines += fit_table(results["choice"]["rows"]) + [""]
    for name, corpus in results["corpora"].items():
        arms = corpus["held_out"]
        lines += [
            f"**{name}**, held-out split ({arms['with']['questions']} questions, embedding threshold "
            f"{arms['with']['threshold']}, lower cut {round(arms['with']['threshold'] - chosen['margin'], 4)}):",
            "",
            *table(arms),
            "",
        ]
    verdict = results["on_by_default"]
    lines.append(f"On by default: **{'yes' if verdict['yes'] else 'no'}** — {verdict['why']}")
    return "\n".join(lines)


def page_with_figures(page: str, results: dict) -> str:
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render(results)}\n{END}{tail}"
