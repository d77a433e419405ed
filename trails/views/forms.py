"""Forms of the operator pages; their errors are shown next to the field."""

from __future__ import annotations

from django import forms

from trails.core.pii import MAX_SUBJECT_CHARACTERS
from trails.models import DISPLAY_STATUSES, PurgeRun

STATUS_CHOICES = [("", "Any status"), *((status, status.capitalize()) for status in DISPLAY_STATUSES)]
SORT_CHOICES = [("age", "Newest first"), ("last_hit", "Last hit"), ("hits", "Most hits")]


# Triage of the pending queue: what approving would serve, personal data, sent back by reports.
FLAG_CHOICES = [
    ("", "Any"),
    ("would_miss", "Pending: would miss once approved"),
    ("would_hint", "Pending: would hint once approved"),
    ("pii", "Pending: may hold personal data"),
    ("reported", "Sent back by agents' reports"),
]


class TrailFilterForm(forms.Form):
    status = forms.ChoiceField(choices=STATUS_CHOICES, required=False)
    q = forms.CharField(required=False, max_length=200, label="Search queries or a trail id")
    section = forms.CharField(required=False, max_length=512, label="Cites section")
    sort = forms.ChoiceField(choices=SORT_CHOICES, required=False)
    flag = forms.ChoiceField(choices=FLAG_CHOICES, required=False, label="Triage")
    since = forms.DateTimeField(required=False, label="Came to it since (UTC)")


OUTCOME_CHOICES = [("", "Any outcome"), ("prefetch", "Prefetch"), ("hint", "Hint"), ("miss", "Miss")]
FEEDBACK_CHOICES = [
    ("", "Any feedback"),
    ("not_helpful", "Not helpful"),
    ("helpful", "Helpful"),
    ("none", "No feedback"),
]

# A recall's second chance, beside its outcome: "given" are the hits a second chance served.
SECOND_CHANCE_CHOICES = [
    ("", "Any"),
    ("given", "Given (a second-chance hit)"),
    ("not_given", "Asked, not given"),
    ("asked", "Asked, given or not"),
]


class RecallLogFilterForm(forms.Form):
    """Filters of the recall log; none of them is caller-written text, so they may sit in the URL."""

    outcome = forms.ChoiceField(choices=OUTCOME_CHOICES, required=False)
    min_similarity = forms.FloatField(min_value=0, max_value=1, required=False, label="Similarity from")
    max_similarity = forms.FloatField(min_value=0, max_value=1, required=False, label="to")
    since = forms.DateTimeField(required=False, label="From (UTC)", help_text="e.g. 2026-12-01 13:00")
    until = forms.DateTimeField(required=False, label="Until (UTC)")
    feedback = forms.ChoiceField(choices=FEEDBACK_CHOICES, required=False)
    second_chance = forms.ChoiceField(choices=SECOND_CHANCE_CHOICES, required=False, label="Second chance")
    key = forms.ChoiceField(choices=[("", "any")], required=False, label="API key")
    before = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, keys: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["key"].choices = [
            ("", "any"),
            *sorted(((lookup, name) for lookup, name in (keys or {}).items()), key=lambda choice: choice[1].lower()),
        ]


class ReplayForm(forms.Form):
    query = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 2}), help_text="The question as an agent would ask it."
    )
    partition = forms.CharField(
        max_length=200, required=False, help_text="Only trails recorded with this partition match."
    )
    token_budget = forms.IntegerField(
        min_value=1, max_value=1_000_000, required=False, help_text="Defaults to the scope's budget."
    )


class PurgeForm(forms.Form):
    subject = forms.CharField(
        max_length=MAX_SUBJECT_CHARACTERS,
        required=False,
        label="Erasure subject",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Every identifier of the person, one per line: name, e-mail, customer id. A name also matches its "
        "words joined by any punctuation or by none (jane.roe, jane_roe, JaneRoe). Leave empty to look for e-mails, phone, card and "
        "IBAN numbers, IP addresses and the scope's own patterns.",
    )
    action = forms.ChoiceField(
        choices=PurgeRun.Action.choices, initial=PurgeRun.Action.REDACT, widget=forms.RadioSelect
    )

    def clean_subject(self) -> str:
        from trails.core.pii import MAX_IDENTIFIERS, identifier_problem, identifiers

        subject = self.cleaned_data["subject"].strip()
        # A one- or two-letter identifier would match nearly every query; one of marks alone, nothing.
        problems = [problem for identifier in identifiers(subject) if (problem := identifier_problem(identifier))]
        if problems:
            raise forms.ValidationError(problems)
        if len(identifiers(subject)) > MAX_IDENTIFIERS:
            # One person's identifiers; a list of people is one erasure each.
            raise forms.ValidationError(f"An erasure subject has at most {MAX_IDENTIFIERS} identifiers (one person's).")
        return "\n".join(identifiers(subject))
