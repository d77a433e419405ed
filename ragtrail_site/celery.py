"""The Celery app. Settings come from Django's, under the CELERY_ prefix."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragtrail_site.settings")

app = Celery("ragtrail")
# Celery's Django fix-up puts the working directory first on sys.path: run from a docs checkout,
# its packages (a `pydantic/`) would shadow ragtrail's own dependencies.
if sys.path and sys.path[0] == os.getcwd() and Path.cwd() != Path(__file__).resolve().parents[1]:
    sys.path.pop(0)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _state_folder(sender, **kwargs) -> None:
    # Beat opens its schedule in RAGTRAIL_STATE_DIR before any of its own signals fire.
    from django.conf import settings

    os.makedirs(settings.RAGTRAIL_STATE_DIR, exist_ok=True)
