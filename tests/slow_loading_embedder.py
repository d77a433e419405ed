"""The hashing embedder, slow to load as the real model is on a busy machine (RAGTRAIL_SLOW_LOAD_S)."""

from __future__ import annotations

import os
import time

from trails.embedders import hashing


class Embedder(hashing.Embedder):
    def __init__(self, model: str = "hashing") -> None:
        time.sleep(float(os.environ.get("RAGTRAIL_SLOW_LOAD_S", "4")))
        super().__init__(model)
