"""The Celery app. Settings come from Django's, under the CELERY_ prefix."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragtrail_site.settings")

app = Celery("ragtrail")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _state_folder(sender, **kwargs) -> None:
    # Beat opens its schedule in RAGTRAIL_STATE_DIR before any of its own signals fire.
    from django.conf import settings

    os.makedirs(settings.RAGTRAIL_STATE_DIR, exist_ok=True)
