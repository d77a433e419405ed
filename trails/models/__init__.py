"""The trails app's models, by concept; every name is importable from `trails.models`.

- `lifecycle`: statuses and the only code that writes them (the declared table is
  trails.core.lifecycle), a trail's history and reports;
- `trail`: a trail and its parts (steps, citations, band keys), and the flagging of trails
  whose sections changed;
- `recalls`: recall events and their hourly roll-ups;
- `learning`: judged matches and every move of a learned threshold;
- `tool_policies`: which tools' results are cached;
- `purge`: personal-data patterns and purge runs;
- `pauses`: the points where writes hold their locks, where race tests hold threads;
- `deletion`: deleting trails and unlinking what outlives them (called through `writes`);
- `writes`: every write to a trail's lifecycle and what it drags along (reports, labels,
  recall verdicts, history, deletion), with the lock order.

A module lower in that list never imports a higher one; `writes` sits on top, so it reaches
every row a write drags along directly. What a write sets off in the upper apps (learning,
re-signing) it tells them after the commit (`trail_status_changed`).
"""

from trails.models import writes
from trails.models.learning import EmbedderCalibration, MatchLabel, ThresholdChange
from trails.models.lifecycle import (
    DISPLAY_STATUSES,
    EXPIRED,
    POSITIVE_SIGNALS,
    ActionRefused,
    Signal,
    TrailReport,
    TrailSignal,
    TrailStatus,
    expiring,
    is_agent,
    mark_stale,
    mark_stale_statements,
    trail_status_changed,
)
from trails.models.purge import PiiPattern, PurgeRun
from trails.models.recall_writes import (
    LoggedMiss,
    forgotten_if_failed,
    logged_miss,
    logging_miss,
    write_recall_effects,
    write_second_chance_effects,
)
from trails.models.recalls import (
    SIMILARITY_BINS,
    RecallEvent,
    RecallOutcome,
    RecallStat,
    SimilarityStat,
)
from trails.models.tool_policies import ToolPolicy, ToolPolicyQuerySet, bump_tool_policy_version
from trails.models.trail import (
    BandKeys,
    Citation,
    Step,
    Trail,
    TrailQuerySet,
    delete_rows,
    trails_partitioned,
    validations_now,
)

__all__ = [
    "trails_partitioned",
    "DISPLAY_STATUSES",
    "EXPIRED",
    "POSITIVE_SIGNALS",
    "ActionRefused",
    "Signal",
    "TrailReport",
    "TrailSignal",
    "TrailStatus",
    "expiring",
    "is_agent",
    "mark_stale",
    "mark_stale_statements",
    "trail_status_changed",
    "BandKeys",
    "Citation",
    "Step",
    "Trail",
    "TrailQuerySet",
    "delete_rows",
    "validations_now",
    "SIMILARITY_BINS",
    "LoggedMiss",
    "forgotten_if_failed",
    "logged_miss",
    "logging_miss",
    "RecallEvent",
    "RecallOutcome",
    "RecallStat",
    "SimilarityStat",
    "write_recall_effects",
    "write_second_chance_effects",
    "EmbedderCalibration",
    "MatchLabel",
    "ThresholdChange",
    "ToolPolicy",
    "ToolPolicyQuerySet",
    "bump_tool_policy_version",
    "PiiPattern",
    "PurgeRun",
    "writes",
]
