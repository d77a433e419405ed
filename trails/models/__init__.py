"""The trails app's models, by concept; every name is importable from `trails.models`.

- `lifecycle`: statuses and the only code that writes them (the declared table is
  trails.core.lifecycle), a trail's history and reports;
- `trail`: a trail and its parts (steps, citations, band keys), and the flagging of trails
  whose sections changed;
- `recalls`: recall events and their hourly roll-ups;
- `learning`: judged matches and every move of a learned threshold;
- `tool_policies`: which tools' results are cached;
- `purge`: personal-data patterns and purge runs.

A module lower in that list never imports a higher one: where a lower one must reach rows of
a higher one (a trail's recall events when it is deleted), it sends a signal the higher one
receives (`trails_deleting`, `trail_status_changed`).
"""
from trails.models.lifecycle import (
    DISPLAY_STATUSES, EXPIRED, POSITIVE_SIGNALS, ActionRefused, Signal, TrailReport, TrailSignal, TrailStatus, actor_of,
    expiring, is_agent, mark_stale, mark_stale_statements, trail_status_changed,
)
from trails.models.trail import (
    BandKeys, Citation, Step, Trail, TrailQuerySet, delete_rows, flag_trails_citing, trails_deleting,
    validations_now,
)
from trails.models.recalls import (
    SIMILARITY_BINS, RecallEvent, RecallOutcome, RecallStat, SimilarityStat, write_recall_effects,
)
from trails.models.learning import MatchLabel, ThresholdChange
from trails.models.tool_policies import ToolPolicy, ToolPolicyQuerySet, bump_tool_policy_version
from trails.models.purge import PiiPattern, PurgeRun

__all__ = [
    "DISPLAY_STATUSES", "EXPIRED", "POSITIVE_SIGNALS", "ActionRefused", "Signal", "TrailReport", "TrailSignal",
    "TrailStatus", "actor_of", "expiring", "is_agent", "mark_stale", "mark_stale_statements", "trail_status_changed",
    "BandKeys", "Citation", "Step", "Trail", "TrailQuerySet", "delete_rows", "flag_trails_citing", "trails_deleting", "validations_now",
    "SIMILARITY_BINS", "RecallEvent", "RecallOutcome", "RecallStat", "SimilarityStat", "write_recall_effects",
    "MatchLabel", "ThresholdChange", "ToolPolicy", "ToolPolicyQuerySet", "bump_tool_policy_version",
    "PiiPattern", "PurgeRun",
]
