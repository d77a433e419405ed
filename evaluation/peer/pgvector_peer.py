"""A bare pgvector lookup answering the same questions as ragtrail, for `manage.py benchmark_peer`.

What a Django + PostgreSQL team would build instead: one table of questions with their
vectors, an HNSW index on the cosine distance (m 16, ef_construction 64, ef_search 40,
pgvector's defaults), and the top-1 answered where its similarity reaches the threshold.
It runs in the benchmark's process on its own connection to the same database, as a
prepared statement with the vector's text made before the clock starts (the peer is given
every advantage). pgvector is a benchmark peer, not a dependency: built from source as
docs/benchmarks.md says; without it `missing()` says why and the benchmark goes on without it.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import psycopg

TABLE = "peer_pgvector_questions"
HNSW = {"m": 16, "ef_construction": 64}
EF_SEARCH = 40


def vector_text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.8g}" for x in np.asarray(vector, dtype=np.float32)) + "]"


class PgvectorPeer:
    """The questions table and its HNSW index, on its own connection (autocommit)."""

    def __init__(self, connection_params: dict[str, Any]) -> None:
        params = {k: v for k, v in connection_params.items() if k not in ("cursor_factory", "context")}
        self.conn = psycopg.connect(**params, autocommit=True)
        self.conn.execute("SET statement_timeout = 0")  # the fill and the index build take minutes
        self.size = 0

    def missing(self) -> str:
        """Why pgvector cannot be measured here ("" where it can)."""
        row = self.conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if row is None:
            return "the vector extension is not installed in this PostgreSQL (docs/benchmarks.md: building pgvector)"
        return ""

    def version(self) -> str:
        row = self.conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return row[0] if row else ""

    def fill(self, vectors: np.ndarray, maintenance_work_mem: str = "1GB") -> dict[str, float]:
        """Makes the table anew with these vectors (ids 1..n in order) and builds its index after,
        as a bulk load does; gives the seconds each took."""
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self.conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        dim = vectors.shape[1]
        self.conn.execute(
            f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, answer text NOT NULL, embedding vector({dim}) NOT NULL)"
        )
        started = time.perf_counter()
        # Binary COPY (pgvector's own binary form: dimensions, a spare int16, big-endian float4s).
        floats = np.asarray(vectors, dtype=">f4")
        vector_head = struct.pack(">ihh", 4 + 4 * dim, dim, 0)
        with self.conn.cursor() as cursor:
            with cursor.copy(f"COPY {TABLE} (id, answer, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
                copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
                for i in range(len(floats)):
                    answer = f"answer {i}".encode()
                    copy.write(
                        struct.pack(">hiqi", 3, 8, i + 1, len(answer)) + answer + vector_head + floats[i].tobytes()
                    )
                copy.write(struct.pack(">h", -1))
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        self.conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        self.conn.execute(
            f"CREATE INDEX {TABLE}_hnsw ON {TABLE} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {HNSW['m']}, ef_construction = {HNSW['ef_construction']})"
        )
        self.conn.execute("RESET maintenance_work_mem")
        self.conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        self.size = len(vectors)
        return {"load_s": round(loaded, 1), "index_s": round(time.perf_counter() - started, 1)}

    def analyse(self) -> None:
        self.conn.execute(f"VACUUM ANALYZE {TABLE}")

    def plan(self, vector_literal: str) -> str:
        rows = self.conn.execute(
            f"EXPLAIN (COSTS OFF) SELECT id, embedding <=> %s::vector AS distance FROM {TABLE} ORDER BY distance LIMIT 1",
            [vector_literal],
        ).fetchall()
        return " / ".join(r[0].strip() for r in rows)

    def ask(self, literals: list[str], threshold: float) -> tuple[list[float], list[int], list[int]]:
        """Times the top-1 lookup of each vector (its text made beforehand); gives the times in ms,
        the nearest id found for each (1-based, stored order) and the ids that are hits (similarity
        at or above the threshold)."""
        sql = f"SELECT id, embedding <=> %s::vector AS distance FROM {TABLE} ORDER BY distance LIMIT 1"
        timings, nearest, hits = [], [], []
        with self.conn.cursor() as cursor:
            for literal in literals:
                t0 = time.perf_counter()
                cursor.execute(sql, [literal], prepare=True)
                row = cursor.fetchone()
                timings.append((time.perf_counter() - t0) * 1000.0)
                nearest.append(row[0] if row else 0)
                if row and 1.0 - row[1] >= threshold:
                    hits.append(row[0])
        return timings, nearest, hits

    def bytes_per_item(self) -> int:
        total = self.conn.execute("SELECT pg_total_relation_size(%s::regclass)", [TABLE]).fetchone()[0]
        return round(total / max(1, self.size))

    def drop(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {TABLE}")

    def close(self) -> None:
        self.conn.close()


def brute_force_nearest(stored: np.ndarray, asked: np.ndarray, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """The exact nearest stored vector of each asked one by cosine (0-based index) and its cosine."""
    stored = stored / np.linalg.norm(stored, axis=1, keepdims=True)
    asked = asked / np.linalg.norm(asked, axis=1, keepdims=True)
    best, cosine = np.empty(len(asked), dtype=np.int64), np.empty(len(asked), dtype=np.float32)
    for start in range(0, len(asked), chunk):
        scores = asked[start : start + chunk] @ stored.T
        best[start : start + chunk] = scores.argmax(axis=1)
        cosine[start : start + chunk] = scores.max(axis=1)
    return best, cosine
