"""The trails app's models, by concept; every name is importable from `trails.models`.

- `trail`: a trail and its parts (steps, citations, band keys, signal history, reports), the
  one table of actions on it, and the flagging of trails whose sections changed;
- `recalls`: recall events and their hourly roll-ups;
- `learning`: judged matches and every move of a learned threshold;
- `tool_policies`: which tools' results are cached;
- `purge`: personal-data patterns and purge runs;
- `bulk`: deleting a whole scope's rows (benchmark and evaluation scopes).

A module lower in that list never imports a higher one: where a lower one must reach rows of
a higher one (a trail's recall events when it is deleted), it sends a signal the higher one
receives (`trails_deleting`, `trail_status_changed`).
"""
from trails.models.trail import (
    DISPLAY_STATUSES, EXPIRED, POSITIVE_SIGNALS, TRAIL_ACTIONS, ActionRefused, BandKey, Citation, Signal, Step, Trail,
    TrailAction, TrailQuerySet, TrailReport, TrailSignal, TrailStatus, delete_rows, flag_trails_citing, is_agent,
    trail_status_changed, trails_deleting,
)
from trails.models.recalls import (
    SIMILARITY_BINS, RecallEvent, RecallOutcome, RecallStat, SimilarityStat, write_recall_effects,
)
from trails.models.learning import MatchLabel, ThresholdChange
from trails.models.tool_policies import ToolPolicy, ToolPolicyQuerySet, bump_tool_policy_version
from trails.models.purge import PiiPattern, PurgeRun
from trails.models.bulk import bulk_transaction, drop_scope, without_statement_timeout

__all__ = [
    "DISPLAY_STATUSES", "EXPIRED", "POSITIVE_SIGNALS", "TRAIL_ACTIONS", "ActionRefused", "BandKey", "Citation", "Signal",
    "Step", "Trail", "TrailAction", "TrailQuerySet", "TrailReport", "TrailSignal", "TrailStatus", "delete_rows",
    "flag_trails_citing", "is_agent", "trail_status_changed", "trails_deleting",
    "SIMILARITY_BINS", "RecallEvent", "RecallOutcome", "RecallStat", "SimilarityStat", "write_recall_effects",
    "MatchLabel", "ThresholdChange", "ToolPolicy", "ToolPolicyQuerySet", "bump_tool_policy_version",
    "PiiPattern", "PurgeRun", "bulk_transaction", "drop_scope", "without_statement_timeout",
]
