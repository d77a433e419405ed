import pytest

from trails.core import pii
from trails.core.pii import find, redact, rules_for

RULES = rules_for([("patient id", r"\bPT-\d{6}\b")], subject="Jane Roe")


@pytest.mark.parametrize(
    "text,rule",
    [
        ("mail me at jane.roe+x@example.org please", "email"),
        ("card 4111 1111 1111 1111 expired", "card number"),
        ("IBAN GB82 WEST 1234 5698 7654 32 is mine", "iban"),
        ("blocked from 192.168.10.4 today", "ip address"),
        ("call +44 20 7946 0958 now", "phone number"),
        ("record PT-123456 was updated", "patient id"),
        ("what did JANE ROE ask", "subject"),
    ],
)
def test_personal_data_is_found(text, rule):
    assert rule in [name for name, _, _ in find(text, RULES)]


def test_numbers_that_fail_the_card_and_iban_checks_are_not_called_cards_or_ibans():
    names = {name for name, _, _ in find("order 4111 1111 1111 1112 and GB00 WEST 1234 5698 7654 32", rules_for())}
    assert not names & {"card number", "iban"}


def test_redaction_replaces_every_match_and_keeps_the_rest():
    assert redact("Is jane@example.org on ward 7? Ask Jane Roe.", RULES) == "Is [redacted] on ward 7? Ask [redacted]."


@pytest.mark.parametrize(
    "subject, text, found",
    [
        ("Park", "Where do visitors park?", True),
        ("Park", "Is Parking free?", False),
        ("12345", "patient 12345.", True),
        ("12345", "patient 123456", False),
        ("O'Brien", "Mr O’Brien called", True),
        ("Zoë Åberg", "zoe aberg asked", True),
        ("zoe aberg", "ZOË ÅBERG asked", True),
        ("Jane Roe", "mail jane.roe@example.com", True),
    ],
)
def test_an_erasure_subject_matches_whole_words_in_any_case_accent_or_quote(subject, text, found):
    rules = pii.rules_for(subject=subject, builtin=False)
    assert bool(pii.find(text, rules)) is found
    if found:
        assert "[redacted]" in pii.redact(text, rules) and pii.in_context(text, rules)[0].count("[") == 1
