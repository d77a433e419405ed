"""Fits the embedding threshold for the configured embedder, prints it with its held-out rates,
stores it keyed by the embedder's name and sets the scopes' thresholds from it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from scopes.models import Scope
from trails.core.embedder_fit import ScoredPair, fit_pairs
from trails.core.guard import EMPTY_LEXICON, Lexicon, check_pair, question_terms
from trails.embedders import get_embedder
from trails.embedders.base import EmbedderUnavailable
from trails.learning import embedder_calibration
from trails.learning.shipped import threshold_for
from trails.models import MatchLabel

# The labelled question pairs the shipped calibration was fitted on, where a checkout has them beside it.
DEFAULT_PAIRS = Path(settings.BASE_DIR).parent / "shared" / "data" / "qqp-pairs-dev.jsonl"
# What --pairs takes, as the help and the errors say it.
PAIRS_FILE = (
    'a JSON lines file of labelled question pairs, one {"a": question, "b": question, "duplicate": true|false} '
    "a line (pairs from the Quora Question Pairs dataset, or your users' questions labelled as asking the same "
    "thing or not; thousands, with both kinds)"
)
# Every FOLDS-th pair is held out: the rates printed for it were never fitted on.
FOLDS = 5
# Bounds the printed table shows the threshold for (besides --bound).
SHOWN_BOUNDS = (0.01, 0.02, 0.05)


class Command(BaseCommand):
    help = (
        "Fits the embedding threshold for the configured embedder (RAGTRAIL_EMBEDDER, RAGTRAIL_EMBEDDING_MODEL) on "
        "labelled pairs or a scope's own labels, prints it with the held-out rates, stores it for the embedder and "
        "sets the scopes' embedding thresholds from it (their trails are re-signed)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--pairs",
            default=str(DEFAULT_PAIRS),
            help=f"{PAIRS_FILE}; default: {DEFAULT_PAIRS}, where the shipped calibration's pairs are kept beside a checkout",
        )
        parser.add_argument(
            "--scope",
            help="fit on this scope's own labels instead (judged recalls whose question it kept) and set only its threshold",
        )
        parser.add_argument("--bound", type=float, default=0.02, help="the false-hit rate fitted for (default 0.02)")
        parser.add_argument("--confidence", type=float, default=0.95, help="one-sided confidence of the bound")
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")
        parser.add_argument("--dry-run", action="store_true", help="print the fit; store and change nothing")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="store the fit even where it rests on fewer pairs than the holding fit stored for this embedder",
        )

    def handle(
        self,
        *args,
        pairs: str,
        scope: str | None,
        bound: float,
        confidence: float,
        limit: int,
        dry_run: bool,
        replace: bool = False,
        **options,
    ) -> None:
        target = None
        if scope:
            target = Scope.objects.filter(slug=scope).first()
            if target is None:
                raise CommandError(f"no scope {scope!r}")
            labelled, lexicon, source = scope_pairs(target), target_lexicon(target), f"labels of scope {target.slug}"
        else:
            path = Path(pairs)
            if not path.is_file():
                raise CommandError(
                    f"no pairs file at {path}: pass --pairs FILE, {PAIRS_FILE}; or fit on a scope's own labels "
                    "with --scope SLUG"
                )
            labelled, lexicon, source = read_pairs(path), EMPTY_LEXICON, path.name
        labelled = labelled[: limit or None]
        if not labelled:
            raise CommandError(f"no labelled pairs in {source}")
        started = time.perf_counter()
        try:
            embedder = get_embedder()
            scored = score(labelled, embedder, lexicon)
        except (EmbedderUnavailable, ImproperlyConfigured) as problem:
            raise CommandError(f"the embedder could not embed the pairs: {problem}") from None
        self.stdout.write(
            f"{len(labelled):,} pairs from {source} embedded by {embedder.name} in {time.perf_counter() - started:.1f} s"
        )
        try:
            fit = fit_pairs(scored, bound, confidence)
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        fit["embedding_model"], fit["pairs_file"] = embedder.name, source
        self.report(fit, bound)
        if dry_run:
            self.stdout.write("dry run: nothing stored")
            return
        refused = refusal(fit, bound, embedder_calibration.stored_fit(embedder.name, target), replace)
        if refused:
            raise CommandError(f"{refused}: nothing stored, no scope changed")
        embedder_calibration.store(embedder.name, fit, source, target)
        self.stdout.write(f"stored for {embedder.name}" + (f" (scope {target.slug} only)" if target else ""))
        scopes = [target] if target else Scope.objects.filter(scratch=False).order_by("slug")
        for each in scopes:
            if not each.uses_embedding:
                continue
            before, after = embedder_calibration.apply(each, embedder.name, fit, "manage.py calibrate_embedder")
            resigned = getattr(each, "resigning", "")
            self.stdout.write(
                f"scope {each.slug}: embedding threshold {before} → {after}{f', {resigned}' if resigned else ''}"
            )

    def report(self, fit: dict, bound: float) -> None:
        fitted, held = fit["matchers"]["embedding"], fit["held_out"]
        self.stdout.write(
            f"embedding threshold {fitted['threshold']} for a false-hit bound of {bound:.1%} "
            f"({'holds' if fitted['holds'] else 'DOES NOT HOLD: the grid ends first'}): {fitted['false_hits']}/{fit['distinct']} "
            f"false hits on the {fit['pairs']:,} pairs fitted on, upper bound {fitted['false_upper']:.2%}"
        )
        for shown in sorted({*SHOWN_BOUNDS, bound}):
            self.stdout.write(f"  bound {shown:.1%}: threshold {threshold_for('embedding', shown, fit)}")
        self.stdout.write(
            f"held out ({held['pairs']:,} pairs never fitted on): false hits {rate(held['false_hits'], held['distinct'], held['false_ci'])}, "
            f"paraphrases matched {rate(held['reused'], held['duplicates'], held['reuse_ci'])}"
        )


def refusal(fit: dict, bound: float, stored: dict | None, replace: bool) -> str:
    """Why the fit must not be stored ("" where it may): one that does not keep the bound would
    serve unrelated answers; one on fewer pairs than the holding fit stored replaces it only on --replace."""
    fitted = fit["matchers"]["embedding"]
    if not fitted["holds"]:
        return (
            f"the fit does not hold: no threshold keeps the false-hit bound of {bound:.1%} on these "
            f"{fit['distinct']:,} non-duplicate pairs (too few pairs, or vectors that tell questions apart poorly)"
        )
    if stored and stored["matchers"]["embedding"].get("holds", True) and not replace:
        if fit["distinct"] < stored["distinct"]:
            return (
                f"the fit rests on {fit['distinct']:,} non-duplicate pairs, fewer than the {stored['distinct']:,} "
                "of the fit stored for this embedder: give --replace to store it anyway"
            )
    return ""


def rate(events: int, trials: int, interval: list[float] | None) -> str:
    if not trials or interval is None:
        return "no pairs"
    return f"{events / trials:.2%} [{interval[0]:.2%}, {interval[1]:.2%}] ({events}/{trials})"


def read_pairs(path: Path) -> list[tuple[str, str, bool]]:
    rows = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as error:
                raise CommandError(f"{path}, line {number}: not JSON ({error})") from None
    try:
        return [(str(row["a"]), str(row["b"]), bool(row["duplicate"])) for row in rows]
    except (KeyError, TypeError):
        raise CommandError(f'{path}: every line must be {{"a": ..., "b": ..., "duplicate": true|false}}') from None


def scope_pairs(scope: Scope) -> list[tuple[str, str, bool]]:
    """The scope's judged embedding matches as pairs: the trail's question, the question asked
    (kept only where the scope keeps raw queries), and whether it was right to serve it."""
    labels = (
        MatchLabel.objects.filter(scope=scope, matcher="embedding", trail__isnull=False, recall_event__isnull=False)
        .exclude(recall_event__query="")
        .order_by("created_at")
        .values_list("trail__query", "recall_event__query", "false_hit")
    )
    return [(stored, asked, not false_hit) for stored, asked, false_hit in labels]


def target_lexicon(scope: Scope) -> Lexicon:
    return Lexicon.from_groups(line.split(",") for line in scope.synonyms.splitlines() if line.strip())


def score(labelled: list[tuple[str, str, bool]], embedder, lexicon: Lexicon) -> list[ScoredPair]:
    """Each pair's cosine as the embedder serving gives it; 0 where the look-alike guard refuses
    the pair (as recall would: such a pair is never served at any threshold)."""
    texts = sorted({text for a, b, _ in labelled for text in (lexicon.rewrite(a), lexicon.rewrite(b))})
    vectors = dict(zip(texts, embedder.embed_many(texts)))
    scored = []
    for index, (a, b, duplicate) in enumerate(labelled):
        a, b = lexicon.rewrite(a), lexicon.rewrite(b)
        allowed = check_pair(question_terms(b, lexicon), question_terms(a, lexicon), max_unshared_terms=None).allowed
        similarity = float(vectors[a] @ vectors[b]) if allowed else 0.0
        scored.append(ScoredPair(similarity, duplicate, held_out=index % FOLDS == 0))
    return scored
