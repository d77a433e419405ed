"""GPTCache 0.1.44 answering the same questions as ragtrail, for `manage.py benchmark_peer`.

Runs in its own venv (evaluation/peer/requirements.txt: GPTCache pins numpy and friends that
the service does not want), as the peer's own users run it: `Cache.init` with SQLite for the
scalar data and FAISS for the vectors, `import_data` to fill it, `gptcache.adapter.api.get`
to ask. The embedding is excluded, as on ragtrail's side: the embedding function looks the
question's precomputed MiniLM vector up in a dict.

Protocol on stdin/stdout, one JSON object a line: the benchmark sends {"get": [start, end]}
and reads {"ms": [...], "hits": n} for the asked questions start..end-1; EOF ends it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from gptcache import Cache, Config
from gptcache.adapter.api import get
from gptcache.manager import CacheBase, VectorBase, get_data_manager
from gptcache.processor.pre import get_prompt
from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation


def main(folder: Path, cosine_threshold: float) -> None:
    stored = json.loads((folder / "stored.json").read_text())
    asked = json.loads((folder / "asked.json").read_text())
    vectors = {text: vector for text, vector in zip(stored, np.load(folder / "stored.npy"))}
    vectors.update(zip(asked, np.load(folder / "asked.npy")))
    started = time.perf_counter()
    # max_size: GPTCache keeps 1,000 questions unless told (it evicts the rest from FAISS).
    data_manager = get_data_manager(
        CacheBase("sqlite", sql_url=f"sqlite:///{folder / 'gptcache.db'}"),
        VectorBase("faiss", dimension=384, index_path=str(folder / "faiss.index")),
        max_size=len(stored) + len(asked),
    )
    cache = Cache()
    # For unit vectors FAISS's squared L2 distance is 2 - 2 cos, and GPTCache ranks a hit by
    # 4 - distance against 4 x similarity_threshold: this is ragtrail's cosine threshold.
    cache.init(
        pre_embedding_func=get_prompt,
        embedding_func=lambda text, **_: vectors[text],
        data_manager=data_manager,
        similarity_evaluation=SearchDistanceEvaluation(),
        config=Config(similarity_threshold=(1 + cosine_threshold) / 2),
    )
    for start in range(0, len(stored), 10_000):
        block = stored[start : start + 10_000]
        cache.import_data(block, [f"answer {start + i}" for i in range(len(block))])
    print(json.dumps({"ready": len(stored), "fill_s": round(time.perf_counter() - started, 1)}), flush=True)
    for line in sys.stdin:
        start, end = json.loads(line)["get"]
        timings, hits = [], 0
        for text in asked[start:end]:
            t0 = time.perf_counter()
            answer = get(text, cache_obj=cache)
            timings.append((time.perf_counter() - t0) * 1000.0)
            hits += answer is not None
        print(json.dumps({"ms": timings, "hits": hits}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
