from django.apps import AppConfig
from django.core import checks
from django.core.signals import request_started
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate, pre_migrate

from trails.checks import embedder_settings


def register_sqlite_functions(sender, connection, **kwargs) -> None:
    """SQLite has no popcount: the candidate read's sketch distance is a Python function there."""
    if connection.vendor == "sqlite":
        from trails.core.simhash import sketch_distance

        connection.connection.create_function(
            "ragtrail_sketch_distance", 4, lambda h, l, qh, ql: sketch_distance((h, l), (qh, ql)), deterministic=True
        )


class TrailsConfig(AppConfig):
    name = "trails"
    verbose_name = "Trails"

    def ready(self) -> None:
        connection_created.connect(register_sqlite_functions, dispatch_uid="ragtrail-sqlite-functions")
        checks.register(embedder_settings)
        from celery.signals import task_prerun

        from trails import memory, tool_results  # noqa: F401 -- tool_results registers what it forgets

        # Every web and worker process forgets what it holds in memory once a purge finished.
        request_started.connect(memory.check, dispatch_uid="ragtrail-forget-after-purge")
        task_prerun.connect(memory.check, dispatch_uid="ragtrail-forget-after-purge-task", weak=False)
        from django.conf import settings

        from scopes.saving import SCOPE_DELETERS
        from trails.models import gate, writes

        if settings.RAGTRAIL_ENFORCE_ONE_WRITER:
            # A write to a row a trail owns from outside the writer fails (docs/consistency.md).
            connection_created.connect(gate.enforce_on_new_connections, dispatch_uid="ragtrail-one-writer")
            pre_migrate.connect(gate.migrating, dispatch_uid="ragtrail-one-writer-migrating")
            post_migrate.connect(gate.migrated, dispatch_uid="ragtrail-one-writer-migrated")
        if writes.delete_scope not in SCOPE_DELETERS:
            SCOPE_DELETERS.append(writes.delete_scope)
        from scopes.keys import JUDGED_SCOPES
        from trails.learning.feedback import judged_scopes

        if judged_scopes not in JUDGED_SCOPES:
            JUDGED_SCOPES.append(judged_scopes)
        # Their receivers act on every path: scope saves (thresholds, re-signing) and trail
        # status changes (rejection labels, signing a reinstated trail).
        from trails.learning import feedback, thresholds  # noqa: F401
        from trails.upkeep import reindex  # noqa: F401
