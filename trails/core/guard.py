"""The look-alike guard: two questions must agree on what makes each one specific.

"What are the ICU visiting hours?" and "What are the general ward visiting
hours?" share most of their words and embed close together, yet serving one's
path for the other is wrong. Before a candidate can win, its question and the
query must name the same numbers, agree on negation, leave no content term of
either one unaccounted for (after mapping synonyms to one term), and put their
shared terms in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from .normalise import shingles, words

# Function words and question scaffolding: they carry no topic, so differing in
# them ("how do I" / "how can I") never makes two questions different.
STOPWORDS = frozenset(
    """
    a an the and or but if then than so as of at by for with about into onto from to in on
    up down out over under off again further once here there when where why how what which
    who whom whose this that these those is are was were be been being am do does did doing
    done have has had having i me my mine myself we us our ours you your yours he him his she
    her hers it its they them their theirs one ones some any each every all both few more
    most other such own same very s t can could will would shall should may might must just
    also too only ever really much many get got getting make way ways thing things
    possible please someone something anyone anything people person use using used
    tell know need want like go going
    """.split()
)

NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor without cannot cant dont doesnt didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt".split()
)
# "don't" normalises to "don t": the "t" after these stems is the negation.
_NEGATED_STEMS = frozenset(
    "don doesn didn isn aren wasn weren won wouldn shouldn couldn can haven hasn hadn ain".split()
)


@dataclass(frozen=True)
class Lexicon:
    """Synonyms of a scope: each term maps to the one canonical term it stands for.

    Multi-word terms ("intensive care") are matched as phrases before single words.
    """

    canonical: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: Iterable[Iterable[str]]) -> "Lexicon":
        """Builds a lexicon from groups of equivalent terms; the first of each group is canonical."""
        canonical: dict[str, str] = {}
        for group in groups:
            terms = [" ".join(words(t)) for t in group]
            terms = [t for t in terms if t]
            for term in terms:
                canonical[term] = terms[0]
        return cls(canonical)

    @cached_property
    def longest_phrase(self) -> int:
        return max((len(t.split()) for t in self.canonical), default=1)

    def rewrite(self, text: str) -> str:
        """Writes every synonym as its canonical term, so matchers see one term.

        Returns the text unchanged when it holds no synonym (the matchers were
        measured on raw text), else its normalised words with synonyms replaced.
        """
        if not self.canonical:
            return text
        tokens = words(text)
        out: list[str] = []
        changed = False
        i = 0
        while i < len(tokens):
            for size in range(min(self.longest_phrase, len(tokens) - i), 0, -1):
                phrase = " ".join(tokens[i : i + size])
                canonical = self.canonical.get(phrase)
                if canonical is not None:
                    changed = changed or canonical != phrase
                    out.append(canonical)
                    i += size
                    break
            else:
                out.append(tokens[i])
                i += 1
        return " ".join(out) if changed else text


EMPTY_LEXICON = Lexicon()

# Counted like digits: "the second Congo war" is not "the first Congo war".
NUMBER_WORDS = frozenset(
    """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
    thousand million billion trillion first second third fourth fifth sixth seventh eighth ninth tenth
    eleventh twelfth twentieth hundredth last single double triple half quarter
    """.split()
)

# Pairs that embed close together yet ask opposite things.
OPPOSITES = frozenset(
    frozenset(pair)
    for pair in (
        ("minimize", "maximize"),
        ("minimum", "maximum"),
        ("min", "max"),
        ("increase", "decrease"),
        ("public", "private"),
        ("north", "south"),
        ("east", "west"),
        ("before", "after"),
        ("buy", "sell"),
        ("best", "worst"),
        ("pro", "con"),
        ("male", "female"),
        ("men", "women"),
        ("man", "woman"),
        ("boy", "girl"),
        ("old", "new"),
        ("oldest", "newest"),
        ("young", "old"),
        ("high", "low"),
        ("higher", "lower"),
        ("highest", "lowest"),
        ("up", "down"),
        ("import", "export"),
        ("input", "output"),
        ("inside", "outside"),
        ("internal", "external"),
        ("upper", "lower"),
        ("cheap", "expensive"),
        ("gain", "lose"),
        ("win", "lose"),
        ("good", "bad"),
        ("positive", "negative"),
        ("start", "stop"),
        ("begin", "end"),
        ("open", "close"),
        ("enable", "disable"),
        ("add", "remove"),
        ("encrypt", "decrypt"),
        ("encode", "decode"),
        ("compress", "decompress"),
        ("install", "uninstall"),
        ("hot", "cold"),
        ("fast", "slow"),
        ("faster", "slower"),
        ("big", "small"),
        ("bigger", "smaller"),
        ("large", "small"),
        ("long", "short"),
        ("more", "less"),
        ("most", "least"),
        ("over", "under"),
        ("in", "out"),
        ("on", "off"),
        ("upgrade", "downgrade"),
        ("upgrading", "downgrading"),
        ("upload", "download"),
        ("monthly", "yearly"),
        ("monthly", "annual"),
        ("login", "logout"),
        ("day", "night"),
        ("husband", "wife"),
        ("mother", "father"),
        ("son", "daughter"),
        ("brother", "sister"),
        ("teacher", "student"),
        ("employer", "employee"),
        ("buyer", "seller"),
        ("client", "server"),
        ("read", "write"),
        ("send", "receive"),
        ("push", "pull"),
        ("legal", "illegal"),
    )
)
# Function words that still set a direction or an amount ("scale up" / "scale down"): not content
# terms, but a question holding one its look-alike holds the opposite of asks the opposite.
PARTICLES = frozenset("up down in out on off over under more less most least".split())
# Under the threshold (a second chance) these also tell questions apart: "when" is not "why",
# "reset all passwords" is not "reset my password".
QUESTION_WORDS = frozenset("when where why who".split())
SCOPE_WORDS = frozenset(
    "all every everyone everybody my mine our other others someone somebody anyone their your".split()
)
_OPPOSITE_PREFIXES = frozenset(("dis", "un", "in", "im", "il", "ir", "non", "anti", "de"))


def are_opposites(a: str, b: str) -> bool:
    """Tells whether two terms ask opposite things ("advantage"/"disadvantage", "min"/"max")."""
    if frozenset((a, b)) in OPPOSITES:
        return True
    if len(a) == len(b):
        return False
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    # The guard asks this of every pair of terms a hit's two questions hold: one slice, not a loop over prefixes.
    return long_.endswith(short) and long_[: len(long_) - len(short)] in _OPPOSITE_PREFIXES


@dataclass(frozen=True)
class QuestionTerms:
    """What the guard compares: numbers, negation and content terms of one question."""

    numbers: frozenset[str]  # digits, number words, ordinals and one-letter names ("measure E")
    negated: bool
    terms: frozenset[str]
    order: tuple[str, ...] = ()  # content terms in order of first appearance
    particles: frozenset[str] = frozenset()  # PARTICLES the question holds
    question_words: frozenset[str] = frozenset()  # QUESTION_WORDS it holds
    scope_words: frozenset[str] = frozenset()  # SCOPE_WORDS it holds


def _singular(word: str) -> str:
    # Crude plural folding so "hours"/"hour" and "queries"/"query" agree; a
    # wrong fold only merges two forms of one word, never two topics.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


# Words that are never content terms.
_NOT_CONTENT = STOPWORDS | NEGATIONS | _NEGATED_STEMS


def _is_number(token: str) -> bool:
    # isalpha() first: most words have no digit, and no letter is a digit.
    return (
        token in NUMBER_WORDS
        or (len(token) == 1 and token not in STOPWORDS)
        or (not token.isalpha() and any(map(str.isdigit, token)))
    )


def question_terms(text: str, lexicon: Lexicon = EMPTY_LEXICON) -> QuestionTerms:
    """Extracts the terms the guard compares from a question."""
    tokens = words(text)
    numbers = frozenset(t for t in tokens if _is_number(t))
    negated = any(
        token in NEGATIONS or (token == "t" and i > 0 and tokens[i - 1] in _NEGATED_STEMS)
        for i, token in enumerate(tokens)
    )
    if not lexicon.canonical:
        # Every recall of a scope without synonyms comes here: no phrase to look up.
        order = [_singular(t) for t in tokens if t not in _NOT_CONTENT and t not in numbers]
    else:
        order = []
        longest = lexicon.longest_phrase
        i = 0
        while i < len(tokens):
            for size in range(min(longest, len(tokens) - i), 0, -1):
                phrase = " ".join(tokens[i : i + size])
                if phrase in lexicon.canonical:
                    order.append(lexicon.canonical[phrase])
                    i += size
                    break
            else:
                token = tokens[i]
                if token not in _NOT_CONTENT and token not in numbers:
                    order.append(lexicon.canonical.get(_singular(token), _singular(token)))
                i += 1
    order = list(dict.fromkeys(order))
    present = frozenset(tokens)
    return QuestionTerms(
        numbers,
        negated,
        frozenset(order),
        tuple(order),
        present & PARTICLES,
        present & QUESTION_WORDS,
        present & SCOPE_WORDS,
    )


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    reason: str = ""


def check_pair(
    query: QuestionTerms,
    candidate: QuestionTerms,
    max_unshared_terms: int | None = 0,
    check_order: bool = True,
    refuse_added_terms: bool = False,
) -> GuardVerdict:
    """Decides whether a candidate question may answer for the query.

    Args:
        query: terms of the incoming question.
        candidate: terms of the stored question.
        max_unshared_terms: how many content terms may stand in one question and
            not the other; 0 demands the same content terms, None sets no limit
            (paraphrases found by embedding reword freely).
        check_order: refuse when shared terms stand in another order.
        refuse_added_terms: the stricter rules for a question under the threshold: refuse where
            one question's content terms are the other's and more ("reset my admin password" /
            "reset my password"), where they ask with another of when/where/why/who, or where
            they differ in whose or how many ("all" / "my" / "someone").

    Returns:
        allowed, or refused with the reason: numbers, negation, opposite terms,
        unshared terms, or shared terms in another order.
    """
    if query.numbers != candidate.numbers:
        return GuardVerdict(False, "numbers differ")
    if query.negated != candidate.negated:
        return GuardVerdict(False, "negation differs")
    only_query, only_candidate = query.terms - candidate.terms, candidate.terms - query.terms
    for term in only_query:
        for other in candidate.terms:
            if are_opposites(term, other):
                return GuardVerdict(False, f"opposite terms: {term} / {other}")
    for term in only_candidate:
        for other in query.terms:
            if are_opposites(term, other):
                return GuardVerdict(False, f"opposite terms: {other} / {term}")
    for term in query.particles - candidate.particles:
        for other in candidate.particles - query.particles:
            if are_opposites(term, other):
                return GuardVerdict(False, f"opposite terms: {term} / {other}")
    unshared = only_query | only_candidate
    if refuse_added_terms and bool(only_query) != bool(only_candidate):
        return GuardVerdict(False, "one question adds terms: " + ", ".join(sorted(unshared)))
    if refuse_added_terms and query.question_words != candidate.question_words:
        return GuardVerdict(
            False, "asks another question: " + ", ".join(sorted(query.question_words ^ candidate.question_words))
        )
    if refuse_added_terms and query.scope_words != candidate.scope_words:
        return GuardVerdict(
            False, "whose or how many differ: " + ", ".join(sorted(query.scope_words ^ candidate.scope_words))
        )
    if max_unshared_terms is not None and len(unshared) > max_unshared_terms:
        return GuardVerdict(False, "terms differ: " + ", ".join(sorted(unshared)))
    shared = query.terms & candidate.terms
    if check_order and [t for t in query.order if t in shared] != [t for t in candidate.order if t in shared]:
        # "convert a string to a number" is not "convert a number to a string".
        return GuardVerdict(False, "terms in another order")
    return GuardVerdict(True)


def content_shingles(text: str, lexicon: Lexicon = EMPTY_LEXICON, terms: QuestionTerms | None = None) -> set[str]:
    """Returns the content terms of a question and their adjacent pairs.

    Candidates are found by these rather than by all shingles: two questions that
    share only "how do I" should not meet at all, while any pair the guard lets
    through has the same content terms in the same order, so the same set here.
    A question made only of function words falls back to all its shingles.
    `terms`, where given, are `question_terms(text, lexicon)` already.
    """
    order = (terms or question_terms(text, lexicon)).order
    if not order:
        return shingles(text)
    result = set(order)
    result.update(f"{a} {b}" for a, b in zip(order, order[1:]))
    return result
