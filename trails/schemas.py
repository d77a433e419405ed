from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, Optional

from ninja import Schema
from pydantic import Field, field_validator

from scopes.schemas import SectionId, StrictSchema, json_int
from trails.core.second_chance import MAX_SEARCH_RESULTS
from trails.core.validation import Outcome, SectionStatus

Query = Annotated[str, Field(min_length=1, max_length=2000)]
Partition = Annotated[str, Field(max_length=200)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# The caller's session (agent run) id; only its hash with the query is kept.
Session = Annotated[str, Field(min_length=1, max_length=200)]


class RecallIn(StrictSchema):
    query: Query
    partition: Partition = ""
    token_budget: Optional[json_int(ge=0, le=200_000)] = None
    dry_run: bool = False
    session: Optional[Session] = None
    # Why it answered as it did; with dry_run only, so the hot path never pays for it.
    explain: bool = False


class SectionResult(Schema):
    id: str
    status: SectionStatus
    # A valid section's current text: on a prefetch, and on a hint where it fits the budget after
    # the hint's words. None for a changed or deleted section, and where the scope keeps hashes
    # only: read the section from your own index and check it against `hash`.
    text: Optional[str] = None
    tokens: Optional[int] = None
    truncated: Optional[bool] = None
    # A valid section's hash (SHA-256 of the UTF-8 text) now, the one it had when recorded.
    hash: Optional[str] = None


class StepOut(Schema):
    tool: str
    args: dict[str, Any]
    section_ids: list[str]


class CandidateExplained(Schema):
    trail_id: str
    query: str
    lexical: Optional[float]
    embedding: Optional[float]
    # "answered", "passed", "below the threshold", "refused by the guard: <rule>" or "stale: ..."
    verdict: str


class Explanation(Schema):
    matcher: str
    lexical_threshold: Optional[float]
    embedding_threshold: Optional[float]
    candidates_read: int
    candidates: list[CandidateExplained]
    # Trails of the scope whose vectors another embedder made (reindex_scope re-embeds them).
    other_embedder_trails: int = 0
    summary: str


class SecondChanceOut(Schema):
    given: bool
    # Why it was or was not given, in one sentence.
    reason: str


class RecallOut(Schema):
    outcome: Outcome
    recall_id: Optional[str]
    trail_id: Optional[str]
    matcher: Optional[Literal["lexical", "embedding", "second-chance"]]
    similarity: Optional[float]
    matched_query: Optional[str]
    sections: list[SectionResult]
    steps: list[StepOut]
    hint: Optional[str]
    tokens: int
    truncated: bool
    explanation: Optional[Explanation] = None
    # On a second chance's answer only.
    second_chance: Optional[SecondChanceOut] = None
    # On a miss: whether the recall kept a near candidate a second chance may serve (ask only then).
    second_chance_possible: bool = False


class SecondChanceIn(StrictSchema):
    # The section ids the agent's own first search returned for the question, best first.
    section_ids: Annotated[list[SectionId], Field(min_length=1, max_length=MAX_SEARCH_RESULTS)]
    token_budget: Optional[json_int(ge=0, le=200_000)] = None


class StepIn(StrictSchema):
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    args: dict[str, Any] = {}
    section_ids: Annotated[list[SectionId], Field(max_length=100)] = []


class RecordIn(StrictSchema):
    query: Query
    partition: Partition = ""
    steps: Annotated[list[StepIn], Field(max_length=50)] = []
    cited: Annotated[list[SectionId], Field(min_length=1, max_length=100)]
    hashes: dict[SectionId, Sha256] = {}
    # Who approved the answer: accepted/user/verifier are served at once; "pending" (or none)
    # waits for an operator's approval.
    signal: Optional[Literal["accepted", "user", "verifier", "pending"]] = Field(
        None,
        description="Who approved the answer this path led to. accepted (the caller), user (a thumbs-up) or "
        "verifier: served to later similar questions at once. pending or absent: kept for an "
        "operator to approve, not served until then.",
    )
    answer: Optional[Annotated[str, Field(max_length=100_000)]] = None
    idempotency_key: Optional[Annotated[str, Field(min_length=1, max_length=200)]] = None
    session: Optional[Session] = None


class RecordOut(Schema):
    trail_id: str
    status: str
    reason: Optional[str] = None
    # Where the scope held this question with these sections already: what recording it again did.
    refreshed: Optional[str] = None


class CitationOut(Schema):
    id: str
    hash: str


class TrailOut(Schema):
    trail_id: str
    query: str
    partition: str
    status: str
    signal: str
    reason: str
    steps: list[StepOut]
    cited: list[CitationOut]
    created_at: str
    expires_at: str
    hit_count: int
    last_hit_at: Optional[str]
    section_changed_at: Optional[str]


class FeedbackIn(StrictSchema):
    vote: Literal["up", "down"]


class RecallFeedbackIn(StrictSchema):
    helpful: bool
    reason: Annotated[str, Field(max_length=500)] = ""


class RecallFeedbackOut(Schema):
    recall_id: str
    helpful: bool
    trail_id: Optional[str]
    # The trail's state after this feedback: "pending" when the reports sent it back.
    trail_status: Optional[str]
    false_hit_reports: Optional[int]
    # How many different keys reported it since it was last approved (the scope's number sends it back).
    false_hit_reporters: Optional[int]


ToolName = Annotated[str, Field(min_length=1, max_length=200)]
ArgName = Annotated[str, Field(min_length=1, max_length=200)]


class ToolPolicyIn(StrictSchema):
    tool: ToolName
    cacheable: bool
    # Needed only where the tool is cacheable; the default is the model's.
    ttl_s: json_int(ge=1, le=30 * 24 * 3600) = 300
    ignore_args: Annotated[list[ArgName], Field(max_length=50)] = []
    path_args: Annotated[list[ArgName], Field(max_length=50)] = []
    per_caller: bool = False


class ToolPoliciesIn(StrictSchema):
    policies: Annotated[list[ToolPolicyIn], Field(max_length=500)]

    @field_validator("policies")
    @classmethod
    def tools_are_unique(cls, policies: list[ToolPolicyIn]) -> list[ToolPolicyIn]:
        tools = [p.tool for p in policies]
        duplicated = sorted({t for t in tools if tools.count(t) > 1})
        if duplicated:
            raise ValueError(f"tools appear more than once: {', '.join(duplicated)}")
        return policies


class ToolPolicyOut(Schema):
    tool: str
    cacheable: bool
    ttl_s: int
    ignore_args: list[str]
    path_args: list[str]
    per_caller: bool


class ToolPoliciesOut(Schema):
    policies: list[ToolPolicyOut]


class ToolLookupIn(StrictSchema):
    tool: ToolName
    args: dict[str, Any]
    context: dict[str, Any]
    caller: Optional[Annotated[str, Field(min_length=1, max_length=200)]] = None


class ToolStoreIn(ToolLookupIn):
    result: Any
    section_ids: Annotated[list[SectionId], Field(max_length=100)] = []
    # The hash of each listed section as the caller read it (from the section store).
    hashes: dict[SectionId, Sha256] = {}


class ToolLookupOut(Schema):
    hit: bool
    result: Any = None
    age_s: Optional[float] = None
    reason: Optional[str] = None


class ToolStoreOut(Schema):
    stored: bool
    ttl_s: Optional[int] = None
    reason: Optional[str] = None


def recall_json(result) -> dict[str, Any]:
    """A recall result as the API answers it (for pages and evaluations that show it)."""
    return RecallOut.model_validate(result).model_dump(mode="json")


class SyncSectionIn(StrictSchema):
    id: SectionId
    # The section's text; or the hash of the text the source holds (a manifest row): enough for
    # a section the store holds unchanged, for a dry run, and for a scope that keeps no text.
    text: Optional[Annotated[str, Field(max_length=1_000_000)]] = None
    hash: Optional[Sha256] = None
    # The built site's anchor where it is not the id's fragment (split_sections writes it).
    anchor: Optional[Annotated[str, Field(max_length=512, pattern=r"^[^\x00-\x1f\x7f]*$")]] = None


class SectionSyncIn(StrictSchema):
    sections: Annotated[
        list[SyncSectionIn],
        Field(
            max_length=50_000,
            description=(
                "Every section the source holds now (the full set): an id with its text, or with its hash (64 hex digits "
                "of SHA-256 over the UTF-8 text). Texts are needed only for sections added or changed; send hashes for the "
                "rest (manage.py split_sections --hashes writes them) and the body stays small. A scope that keeps no text "
                "takes hashes for all."
            ),
        ),
    ]
    delete_missing: bool = Field(False, description="Remove sections in the store that the source no longer holds.")
    dry_run: bool = Field(False, description="Say what would change; write nothing.")
    allow_removing_most: bool = Field(
        False,
        description=(
            "With delete_missing, remove even more than half of the scope's sections (else refused: a wrong folder or format)."
        ),
    )
    source: Annotated[
        str, Field(max_length=500, description="What was synced (a repository and commit), shown to operators.")
    ] = ""
    background: bool = Field(
        False,
        description=(
            "Run the sync as a job: the answer is 202 with the job's status URL at once (poll it: queued, running, "
            "done with the summary, or failed with the error). A body of more than 10,000 sections (the server's "
            "RAGTRAIL_SYNC_INLINE_SECTIONS) always runs as a job."
        ),
    )
    list_all: bool = Field(
        False,
        description=(
            "List every section id and every moved trail id in the answer (else at most 50 per kind; counts are always whole)."
        ),
    )


class SectionSyncCounts(Schema):
    added: int
    changed: int
    unchanged: int
    removed: int
    missing: int


class SectionSyncJobOut(Schema):
    job_id: uuid.UUID
    state: str = Field(description="queued, running, done or failed")
    status_url: str
    created_at: datetime
    finished_at: Optional[datetime] = None
    # When done: the summary a sync in the request would have answered.
    summary: Optional[dict] = None
    # When failed: {code, message, field}, as the API's errors say it.
    error: Optional[dict] = None


class SectionSyncOut(Schema):
    dry_run: bool
    sections: SectionSyncCounts
    trails: dict[str, int]
    ids: dict[str, list[str]]
    # Public ids of the served trails that move, by move ("prefetch → hint", "hint → prefetch", ...).
    moved_trails: dict[str, list[str]] = {}
    # Served trails citing a `missing` section: still prefetched with text the source dropped.
    trails_citing_missing: int = 0
    # False when a list above was cut to 50 (send list_all to get them all).
    ids_complete: bool = True
    sync_id: Optional[int] = None
    # On a dry run: why the sync itself would be refused (it removes most of the scope unasked).
    refusal: Optional[str] = None
