"""Static files with hashed names and compressed copies, cached for a year: whitenoise's
manifest storage, filled by `manage.py collectstatic` (the production recipe runs it).

Where collectstatic has not run into STATIC_ROOT (`make run`, the tests), pages name the
files as they are and whitenoise serves them from the finders, with a short cache."""

from __future__ import annotations

from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    def url(self, name: str | None, force: bool = False) -> str:
        if not self.hashed_files and not force:
            return StaticFilesStorage.url(self, name)  # no manifest: collectstatic has not run here
        return super().url(name, force)
