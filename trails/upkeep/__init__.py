"""Upkeep: jobs that keep the store in shape, each an idempotent function with a management
command and a Celery task (trails.tasks): the sweep and the roll-up (jobs), re-signing
(reindex), personal-data purges (purge) and docs syncs (sync)."""
