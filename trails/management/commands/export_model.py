"""Makes the ONNX export of the embedding model ahead of time (a deploy step)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from trails.embedders import onnx
from trails.embedders.sentence_transformer import model_path


class Command(BaseCommand):
    help = (
        "Exports RAGTRAIL_EMBEDDING_MODEL to ONNX in RAGTRAIL_MODEL_CACHE, checked against the "
        "model on probe texts, unless that model's export is there already. Workers otherwise "
        "make it on first start."
    )

    def handle(self, *args, **options) -> None:
        model_dir = Path(model_path(settings.RAGTRAIL_EMBEDDING_MODEL))
        cache_dir = Path(settings.RAGTRAIL_MODEL_CACHE)
        target = onnx.export_path(model_dir, cache_dir)
        if target.exists():
            self.stdout.write(f"already exported: {target}")
            return
        started = time.perf_counter()
        try:
            onnx.ensure_export(model_dir, cache_dir)
        except onnx.ExportRefused as refused:
            advice = (
                "; set RAGTRAIL_EMBEDDER=trails.embedders.sentence_transformer"
                if importlib.util.find_spec("torch")
                else ""
            )
            raise CommandError(f"{refused}{advice}") from None
        self.stdout.write(f"exported in {time.perf_counter() - started:.1f} s: {target}")
