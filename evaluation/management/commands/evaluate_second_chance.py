"""The second chance measured with real searches on Quora's pairs and the Python FAQ (docs/second-chance.md)."""

from __future__ import annotations

import json
import os
import time
from datetime import date
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from evaluation import matching
from evaluation import results as benchmark_results
from evaluation import second_chance as lab
from evaluation import second_chance_report as report
from evaluation.bm25 import BM25
from evaluation.matching import DEFAULT_PAIRS
from evaluation.scale import embedded
from scopes.models import Scope
from trails.embedders import PrecomputedEmbedder, get_embedder, serving

ROOT = Path(settings.BASE_DIR)
DEFAULT_FAQ = ROOT.parent / "shared" / "data" / "python-faq"
RESULTS = ROOT / "docs" / "second-chance-results.json"
PAGE = ROOT / "docs" / "second-chance.md"


class Command(BaseCommand):
    help = (
        "Streams Quora's questions and the Python FAQ's through recall, a BM25 search, the second chance "
        "and record: fits the second chance's margin and top on the fit split, then runs the held-out split "
        "with and without it, side by side; writes the figures to docs/second-chance-results.json and the "
        "table of docs/second-chance.md."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--faq", default=str(DEFAULT_FAQ), help="the Python FAQ folder (sections and questions)")
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs of the file")
        parser.add_argument("--results", default=str(RESULTS), help="where the figures are written")
        parser.add_argument("--page", default=str(PAGE), help="the page whose figures are rewritten ('' for none)")
        parser.add_argument(
            "--page-only", action="store_true", help="rewrite the page's figures from the results file, run nothing"
        )
        parser.add_argument("--cache", default=str(ROOT / "bench-out"), help="vectors kept between runs ('' for none)")

    def handle(
        self, *args, pairs: str, faq: str, limit: int, results: str, page: str, cache: str, page_only: bool, **options
    ) -> None:
        if page_only:
            figures = json.loads(Path(results).read_text(encoding="utf-8"))
            Path(page).write_text(
                report.page_with_figures(Path(page).read_text(encoding="utf-8"), figures), encoding="utf-8"
            )
            self.stdout.write(f"figures of {page} rewritten from {results}")
            return
        for name, path in (("--pairs", Path(pairs)), ("--faq", Path(faq))):
            if not path.exists():
                raise CommandError(f"{name}: no such file or folder {path}")
        started = time.perf_counter()
        corpora = [lab.quora_corpus(matching.load_pairs(Path(pairs), limit)), lab.faq_corpus(Path(faq))]
        texts = sorted({q.text for c in corpora for stream in c.streams.values() for q in stream})
        model = get_embedder()
        vectors = embedded(texts, model, Path(cache) if cache else None)
        self.stdout.write(f"{len(texts):,} questions embedded in {time.perf_counter() - started:.0f} s ({model.name})")
        bound = Scope._meta.get_field("max_false_hit_rate").default
        figures: dict = {"corpora": {}}
        with serving(PrecomputedEmbedder(model, texts, vectors)) as embedder:
            vector_of = lambda text: embedder.embed_many([text])[0]  # noqa: E731 -- precomputed: a dict read
            indexes = {c.name: BM25(c.sections) for c in corpora}
            fits = {}
            for corpus in corpora:
                self.stdout.write(
                    f"{corpus.name}: {len(corpus.sections):,} sections; fit {len(corpus.streams['fit']):,} questions, "
                    f"held out {len(corpus.streams['validation']):,}; {json.dumps(corpus.notes)[:300]}"
                )
                fits[corpus.name] = lab.fit(corpus, indexes[corpus.name], vector_of, self.stdout.write)
            choice = lab.choose_rule(fits, bound)
            self.print_fit(choice, bound)
            for corpus in corpora:
                arms = lab.held_out(corpus, indexes[corpus.name], vector_of, choice["chosen"], self.stdout.write)
                figures["corpora"][corpus.name] = {
                    "notes": corpus.notes,
                    "sections": len(corpus.sections),
                    "fit": fits[corpus.name]["stream"] | {"threshold": fits[corpus.name]["threshold"]},
                    "fit_rules": fits[corpus.name]["rules"],
                    "held_out": arms,
                }
        figures |= {
            "command": "manage.py evaluate_second_chance" + (f" --limit {limit}" if limit else ""),
            "at": date.today().isoformat(),
            "commit": benchmark_results.commit(),
            "machine": f"{os.cpu_count()} cores",
            "embedding_model": model.name,
            "bound": bound,
            "denominator": "non-duplicate questions (no earlier question had the same truth); wrong serves of the "
            "first and the second chance together, as the scope's false-hit bound counts them",
            "choice": choice,
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
        figures["on_by_default"] = lab.verdict(figures, bound)
        for name, corpus in figures["corpora"].items():
            self.stdout.write(
                f"\n{name}, held-out split, margin {choice['chosen']['margin']:.2f}, top {choice['chosen']['top']}:"
            )
            self.stdout.write("\n".join(report.table(corpus["held_out"])))
        self.stdout.write(
            f"\nOn by default: {'yes' if figures['on_by_default']['yes'] else 'no'} ({figures['on_by_default']['why']})"
        )
        self.stdout.write(f"wall time {figures['wall_seconds']:.0f} s")
        Path(results).write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        self.stdout.write(f"figures written to {results}")
        if page and Path(page).exists():
            Path(page).write_text(
                report.page_with_figures(Path(page).read_text(encoding="utf-8"), figures), encoding="utf-8"
            )
            self.stdout.write(f"figures of {page} rewritten")

    def print_fit(self, choice: dict, bound: float) -> None:
        self.stdout.write(
            f"\nfit splits, both corpora: second-chance serves per rule; upper: served wrong per non-duplicate "
            f"question, first and second chance together (bound {bound}):"
        )
        for row in sorted(choice["rows"], key=lambda r: (r["first_cited"], r["margin"], r["top"])):
            self.stdout.write(
                f"  {row['rule']:<34} serves {row['serves']:>5}  right {row['right']:>5}  wrong {row['wrong']:>4}  "
                f"upper {100 * row['wrong_upper']:6.2f} %  {'holds' if row['holds'] else ''}"
            )
        chosen = choice["chosen"]
        self.stdout.write(
            f"chosen: {chosen['rule']} ({'within the bound' if chosen['holds'] else 'no rule within the bound: the lowest upper bound'})"
        )
        self.stdout.write(
            f"the first chance alone: {choice['first_chance_wrong']} wrong of {choice['non_duplicates']} "
            f"non-duplicate questions, upper {100 * choice['first_chance_wrong_upper']:.2f} %"
        )
