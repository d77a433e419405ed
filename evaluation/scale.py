"""Real-looking questions at any store size, for the scale benchmark.

The store starts with the first question of every QQP dev pair, embedded by the model,
and grows with paraphrase-like variants of them. A variant's vector relates to its base
question as a real pair's second question relates to its first: the cosine is drawn
from the dev pairs' own cosines (those of same-topic pairs, 0.5 and over), the rest
leans towards another stored question (so the variants stay inside the region real
questions occupy, not on an isotropic sphere). Its text is the base question reworded
by templates. The asked questions are the pairs' second questions (labelled duplicate or
not), stored questions asked again, and unseen variants. The same seed gives the same
store and questions at every size.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import JSONField
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from evaluation.bulk import bulk_transaction, without_statement_timeout
from evaluation.fill import BlockSigner, copy_statement, store_block
from evaluation.matching import DEFAULT_PAIRS, load_pairs
from scopes.demo import faq_sections
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.embedders.base import BaseEmbedder
from trails.models import BandKeys, Citation, Step, Trail, TrailSignal, writes
from trails.serving.record import RecordInput, TrailRows, band_key_rows

OPENINGS = [
    "",
    "",
    "",
    "Quick question: ",
    "Can anyone tell me: ",
    "I was wondering, ",
    "Honest answers only: ",
    "Serious question: ",
    "Does anyone know: ",
    "Help please: ",
]
CLOSINGS = [
    "",
    "",
    "",
    " Thanks!",
    " Any ideas?",
    " Please explain.",
    " Asking for a friend.",
    " Any advice?",
    " Thanks in advance.",
    " Looking for real answers.",
]
# How many variants are made at once (one random stream per block, so growing a store
# from 10,000 to 100,000 trails keeps the first 10,000 as they were).
BLOCK = 10_000


def embedded(texts: list[str], embedder: BaseEmbedder, cache: Path | None) -> np.ndarray:
    """The model's vectors of these texts, kept in `cache` (a directory) so a rerun does not embed them again."""
    if cache is None:
        return embedder.embed_many(texts)
    digest = hashlib.sha256("\n".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = cache / f"vectors-{embedder.name}-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.embed_many(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


@dataclass(frozen=True)
class Asked:
    text: str
    vector: np.ndarray
    kind: str  # "duplicate" / "not duplicate" (a pair's second question), "stored", "unseen"


class ScaleWorkload:
    def __init__(
        self,
        embedder: BaseEmbedder,
        seed: int = 7,
        pairs_path: Path = DEFAULT_PAIRS,
        cache: Path | None = Path(settings.BASE_DIR) / "bench-out",
    ) -> None:
        self.seed = seed
        pairs = load_pairs(pairs_path)
        firsts = list(dict.fromkeys(p["a"] for p in pairs))
        seconds = [p for p in pairs if p["b"] not in set(firsts)]
        texts = list(dict.fromkeys(firsts + [p["b"] for p in seconds]))
        vectors = embedded(texts, embedder, cache)
        self.vector_of = dict(zip(texts, vectors))
        self.base_texts = firsts
        self.base = np.stack([self.vector_of[t] for t in firsts])
        self.pairs = seconds
        # Same-topic pairs only (three in four): under 0.5 a variant would be mostly its
        # donor's vector under its base's text.
        cosines = np.array([float(self.vector_of[p["a"]] @ self.vector_of[p["b"]]) for p in seconds])
        self.pair_cosines = cosines[cosines >= 0.5]
        self.texts: list[str] = list(firsts)
        self.vectors: list[np.ndarray] = [self.base]
        self.used = set(firsts)
        self.count = len(firsts)
        self.handed_out = 0

    def grow(self, size: int) -> tuple[list[str], np.ndarray]:
        """Grows the store to `size` trails; returns the trails not handed out before (texts and vectors)."""
        start, self.handed_out = self.handed_out, max(self.handed_out, size)
        while self.count < size:
            # Whole blocks only, each from its own stream, whatever sizes are asked for.
            texts, vectors = self._variants(BLOCK - self.count % BLOCK, self.count // BLOCK)
            self.texts.extend(texts)
            self.vectors.append(vectors)
            self.count += len(texts)
        return self.texts[start:size], self.matrix()[start:size]

    def first(self, size: int) -> tuple[list[str], np.ndarray]:
        """The first `size` trails handed out (texts and vectors): a second store of the same
        questions, or the whole store a peer is given."""
        if size > self.handed_out:
            raise ValueError(f"only {self.handed_out:,} trails handed out, not {size:,}")
        return self.texts[:size], self.matrix()[:size]

    def matrix(self) -> np.ndarray:
        if len(self.vectors) > 1:
            self.vectors = [np.concatenate(self.vectors)]
        return self.vectors[0]

    def _variants(self, count: int, stream: int) -> tuple[list[str], np.ndarray]:
        rng = np.random.default_rng([self.seed, stream])
        words = random.Random(f"{self.seed}:{stream}")
        base = rng.integers(0, len(self.base), count)
        # Donors are stored questions, never asked ones: a variant leaning towards an
        # asked question would be a near copy of it under another question's text.
        donor = self.base[rng.integers(0, len(self.base), count)]
        cosine = np.clip(rng.choice(self.pair_cosines, count), -0.999, 0.999)[:, None]
        b = self.base[base]
        lean = donor - (donor * b).sum(1, keepdims=True) * b
        # A donor that is (nearly) the base itself leaves only rounding noise to lean on,
        # which may point anywhere (even at -base): lean on a random direction instead.
        flat = np.linalg.norm(lean, axis=1) < 1e-3
        if flat.any():
            noise = rng.standard_normal((int(flat.sum()), b.shape[1])).astype(b.dtype)
            lean[flat] = noise - (noise * b[flat]).sum(1, keepdims=True) * b[flat]
        lean /= np.linalg.norm(lean, axis=1, keepdims=True)
        vectors = cosine * b + np.sqrt(1.0 - cosine**2) * lean
        vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
        texts = [self._reworded(self.base_texts[i], words) for i in base]
        return texts, vectors

    def _reworded(self, text: str, words: random.Random) -> str:
        # Texts stay distinct: each maps to its own vector. After many tries the
        # variant is told apart by a plain word, never a number (the guard reads numbers).
        for _ in range(20):
            candidate = f"{words.choice(OPENINGS)}{text}{words.choice(CLOSINGS)}"
            if candidate not in self.used:
                break
        else:
            candidate = f"{text} (another {words.choice(['take', 'view', 'angle', 'case', 'one'])} {len(self.used):x})"
            candidate = candidate.translate(str.maketrans("0123456789", "ghijklmnop"))
        self.used.add(candidate)
        return candidate

    def asked(self, count: int) -> list[Asked]:
        """Questions to time: half the pairs' second questions, a quarter stored ones, a quarter unseen variants."""
        rng = random.Random(self.seed)
        pairs = rng.sample(self.pairs, min(len(self.pairs), count // 2))
        result = [
            Asked(p["b"], self.vector_of[p["b"]], "duplicate" if p["duplicate"] else "not duplicate") for p in pairs
        ]
        stored = rng.sample(range(len(self.base_texts)), count // 4)
        result += [Asked(self.base_texts[i], self.base[i], "stored") for i in stored]
        texts, vectors = self._variants(count - len(result), stream=2**40)  # no store block uses it
        result += [Asked(t, v, "unseen") for t, v in zip(texts, vectors)]
        rng.shuffle(result)
        return result


def store_trails(
    scope: Scope, texts: list[str], vectors: np.ndarray, current: dict[str, Section], cited: Callable[[int], list[str]]
) -> list[int]:
    """Stores these questions as accepted trails with the vectors given (no model), the i-th
    citing `cited(i)` after one search step; returns their ids in order."""
    now = timezone.now()
    rows = []
    with serving(PrecomputedEmbedder(get_embedder(), texts, vectors)):
        for i, text in enumerate(texts):
            sections = cited(i)
            rows.append(
                TrailRows.build(
                    scope,
                    RecordInput(
                        query=text,
                        cited=sections,
                        signal="accepted",
                        steps=[RecordedStep("search", {"query": text}, sections)],
                    ),
                    current,
                    "",
                    now,
                )
            )
    save_fast(rows)
    return [r.trail.id for r in rows]


def faq_sections_for(scope: Scope) -> dict[str, Section]:
    """Gives the scope the first 200 FAQ sections (the scale benchmarks' trails cite these)."""
    Section.upsert(scope, dict(list(faq_sections("old").items())[:200]))
    return {s.section_id: s for s in Section.objects.filter(scope=scope)}


# Trails signed and written at once by the vectorised fill (its shingle matrix for 20,000
# questions is about 150 MB).
FAST_BLOCK = 20_000


def store_citing_two(
    scope: Scope, texts: list[str], vectors: np.ndarray, current: dict[str, Section], seed: int
) -> list[int]:
    """Stores the questions in blocks, each citing two of the sections at random (seeded);
    returns their ids in order. An embedding-only scope on PostgreSQL is filled by the
    vectorised fill (evaluation.fill), with the same rows."""
    section_ids = sorted(current)
    rng = np.random.default_rng(seed)
    two_sections = lambda _: [section_ids[i] for i in rng.choice(len(section_ids), 2, replace=False)]
    ids: list[int] = []
    if connection.vendor == "postgresql" and scope.uses_embedding and not scope.uses_lexical:
        signer = BlockSigner(scope)
        with ThreadPoolExecutor(1) as signing:
            # The next block is signed (Python and numpy) while PostgreSQL writes this one.
            pending = signing.submit(signer.sign, texts[:FAST_BLOCK], vectors[:FAST_BLOCK])
            for start in range(0, len(texts), FAST_BLOCK):
                signed = pending.result()
                end = start + FAST_BLOCK
                if end < len(texts):
                    pending = signing.submit(
                        signer.sign, texts[end : end + FAST_BLOCK], vectors[end : end + FAST_BLOCK]
                    )
                cited = [two_sections(i) for i in range(len(signed.keys))]
                ids += store_block(signer, texts[start:end], vectors[start:end], signed, cited, current, timezone.now())
        return ids
    for start in range(0, len(texts), 5000):
        ids += store_trails(scope, texts[start : start + 5000], vectors[start : start + 5000], current, two_sections)
    return ids


def save_fast(all_rows: list[TrailRows]) -> None:
    """Writes built trails as TrailRows.save_all does, but the child rows through COPY on
    PostgreSQL: a million trails are 30 million band keys."""
    if connection.vendor != "postgresql":
        TrailRows.save_all(all_rows)
        return
    writes.bulk_load(lambda: _copy_rows(all_rows))


def _copy_rows(all_rows: list[TrailRows]) -> None:
    with bulk_transaction(), connection.cursor() as cursor:
        Trail.objects.bulk_create([rows.trail for rows in all_rows], batch_size=5000)
        for model, attribute in ((Step, "steps"), (Citation, "citations"), (TrailSignal, "signals")):
            fields = [f for f in model._meta.concrete_fields if not f.primary_key]
            with cursor.cursor.copy(copy_statement(model, [f.column for f in fields])) as copy:
                for rows in all_rows:
                    for child in getattr(rows, attribute):
                        child.trail_id = child.trail.id
                        copy.write_row([_copy_value(f, child) for f in fields])
        with cursor.cursor.copy(
            copy_statement(BandKeys, ["trail_id", "scope_id", "keys", "sketch_high", "sketch_low"])
        ) as copy:
            for rows in all_rows:
                for row in band_key_rows(rows.trail, rows.question):
                    copy.write_row(row)


def _copy_value(field, obj):
    value = getattr(obj, field.attname)
    if isinstance(value, DatabaseDefault):
        return getattr(field.db_default, "value", field.db_default)  # COPY has no DEFAULT per value
    return json.dumps(value) if isinstance(field, JSONField) else value


TRAIL_TABLES = tuple(model._meta.db_table for model in (Trail, BandKeys, Citation, Step, TrailSignal))


def footprint() -> dict:
    """Bytes on disk per stored trail: every table a trail owns rows in, with its indexes and
    TOAST (PostgreSQL's `pg_total_relation_size`), over every trail the database holds.

    Read on a database that holds only the benchmark's scopes, it is the cost of a trail.
    """
    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {Trail._meta.db_table}")
        trails = cursor.fetchone()[0]
        tables = {}
        for table in TRAIL_TABLES:
            cursor.execute(
                "SELECT pg_total_relation_size(%s::regclass), pg_relation_size(%s::regclass)", [table, table]
            )
            total, heap = cursor.fetchone()
            tables[table] = {"bytes": total, "heap_bytes": heap}
    total = sum(t["bytes"] for t in tables.values())
    return {
        "trails": trails,
        "bytes": total,
        "bytes_per_trail": round(total / max(1, trails)),
        "tables": {name: {**t, "bytes_per_trail": round(t["bytes"] / max(1, trails))} for name, t in tables.items()},
    }


def database_label() -> str:
    """The database, and on PostgreSQL its shared buffers: the figures at a million trails depend on them.

    This machine's kernel pages out page-cache pages left untouched for a minute (DAMON), so
    what PostgreSQL's own buffers do not hold is often read from disk again.
    """
    if connection.vendor != "postgresql":
        return connection.vendor
    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_buffers")
        return f"postgresql (shared_buffers {cursor.fetchone()[0]})"


@contextmanager
def indexes_built_after(
    say: Callable[[str], None], tables: tuple[str, ...] = TRAIL_TABLES, workers: int = 2, maintenance_work_mem: str = ""
) -> Iterator[dict]:
    """Drops the trail tables' indexes that hold no constraint while a bulk fill writes, and
    builds them again after it, as a restore does (PostgreSQL).

    Row by row, each trail's index entries land at random in indexes larger than the
    buffers (30 band keys in one inverted index, the question's trigrams in another), and
    each page's first change after a checkpoint is logged whole: a ten-million-trail fill
    wrote about four times the store's size to the WAL. Built after, each index is one sort.
    Unique indexes and those of keys stay (the fill's rows are checked against them).

    The builds run on `workers` connections at once, as `pg_restore --jobs` does: PostgreSQL 15
    builds an inverted index on one core, and the two largest (band keys, trigrams) lie on
    different tables. Inside a transaction (a test's) they run on its connection, one after
    another: another connection would wait on the transaction's locks.

    Yields a dict that holds, once the builds are done, their seconds in all ("seconds") and
    each index's ("indexes").
    """
    built: dict = {}
    if connection.vendor != "postgresql":
        yield built
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.tablename, i.indexname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
            "AND c.relnamespace = 'public'::regnamespace LEFT JOIN pg_constraint k ON k.conindid = c.oid "
            "WHERE i.schemaname = 'public' AND i.tablename = ANY(%s) AND k.oid IS NULL AND i.indexdef NOT LIKE 'CREATE UNIQUE%%'",
            [list(tables)],
        )
        dropped = cursor.fetchall()
        for _, name, _ in dropped:
            cursor.execute(f'DROP INDEX "{name}"')
    say(f"  {len(dropped)} indexes dropped for the fill: {', '.join(name for _, name, _ in dropped)}")
    try:
        yield built
    finally:
        started = time.perf_counter()
        workers = 1 if connection.in_atomic_block else max(1, min(workers, len({table for table, _, _ in dropped})))
        took = build_indexes(dropped, workers=workers, maintenance_work_mem=maintenance_work_mem)
        built.update(seconds=time.perf_counter() - started, indexes=took)
        say(
            f"  {len(dropped)} indexes built again on {workers} connection{'s' if workers > 1 else ''} "
            f"({built['seconds']:.0f} s): "
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(took.items(), key=lambda item: -item[1]))
        )


def build_indexes(
    indexes: list[tuple[str, str, str]], workers: int = 1, maintenance_work_mem: str = ""
) -> dict[str, float]:
    """Runs each (table, name, CREATE INDEX statement), a table's indexes on one connection and
    tables handed to `workers` connections largest first, each to the least loaded. Gives the
    seconds each build took."""
    by_table: dict[str, list[tuple[str, str]]] = {}
    for table, name, definition in indexes:
        by_table.setdefault(table, []).append((name, definition))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_relation_size(oid) FROM pg_class WHERE relname = ANY(%s) "
            "AND relnamespace = 'public'::regnamespace",
            [list(by_table)],
        )
        size = dict(cursor.fetchall())
    shares: list[list[tuple[str, str]]] = [[] for _ in range(max(1, workers))]
    loads = [0] * len(shares)
    for table in sorted(by_table, key=lambda t: -size.get(t, 0)):
        least = loads.index(min(loads))
        shares[least] += by_table[table]
        loads[least] += size.get(table, 0)
    took: dict[str, float] = {}

    def build(share: list[tuple[str, str]]) -> None:
        with without_statement_timeout(), connection.cursor() as cursor:
            if maintenance_work_mem:
                cursor.execute("SET maintenance_work_mem = %s", [maintenance_work_mem])
            for name, definition in share:
                started = time.perf_counter()
                cursor.execute(definition)
                took[name] = time.perf_counter() - started
            if maintenance_work_mem:
                cursor.execute("RESET maintenance_work_mem")

    if len(shares) == 1:
        build(shares[0])
        return took

    def build_on_own_connection(share: list[tuple[str, str]]) -> None:
        try:
            build(share)
        finally:
            connection.close()  # this thread's own

    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        for done in [pool.submit(build_on_own_connection, share) for share in shares if share]:
            done.result()
    return took


def vacuum_analyze(tables: tuple[str, ...] = TRAIL_TABLES) -> None:
    """What autovacuum does after a bulk fill, now: statistics and a visibility map.

    Without them the planner reads a freshly filled table as empty. VACUUM cannot run
    inside a transaction (a test's), ANALYZE can; the statement timeout is lifted because
    vacuuming a table an earlier run filled and dropped takes minutes.
    """
    if connection.vendor != "postgresql":
        return
    command = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
    with without_statement_timeout(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"{command} {table}")
