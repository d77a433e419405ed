"""A vectorised fill for the scale benchmarks: trails signed in numpy, written with COPY.

Signing a question one by one (trails.serving.matching.sign) and writing it through the ORM cost
3 ms a trail: a million trails took 40 minutes. Here a block of questions is signed at
once and every row is written with COPY, band keys in PostgreSQL's binary format straight
from numpy. The rows are the ones record would write for the same question, vector and
citations (tests/test_fill.py compares them column by column); only an embedding-only
scope is filled this way (a lexical scope's band keys are MinHashes of content shingles,
which stay on the slow path).
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.db import DatabaseError, connection, transaction
from django.db.models import NOT_PROVIDED

from evaluation.bulk import bulk_transaction
from scopes.models import Scope, Section
from trails.core.banding import band_key, band_prefix, scope_salt
from trails.core.normalise import normalise_query
from trails.core.simhash import SimHashParams, _hyperplanes, encode_vector, simhash_bits, sketch_params
from trails.embedders import get_embedder
from trails.models import BandKeys, Citation, Step, Trail, TrailSignal
from trails.serving.matching import embedding_namespace, matching_settings, simhash_params

# A projection this close to 0 may fall on the other side of its hyperplane in a matrix
# product than in the one-vector product record uses (BLAS sums in another order): such
# rows are projected again one by one, so every bit is the one record would store.
_ROUNDING_MARGIN = 1e-4


@dataclass(frozen=True)
class SignedBlock:
    """What `sign` gives for each of a block of questions, as arrays (one row a question)."""

    keys: np.ndarray  # (n, bands) int64: the embedding band keys
    sketch: np.ndarray  # (n, 2) int64: sketch high, sketch low


class BlockSigner:
    """Signs blocks of questions as `trails.serving.matching.sign` does in an embedding-only scope,
    given their vectors. The scope's settings are read here, once; `sign` touches no
    database, so the next block can be signed in a thread while PostgreSQL writes this one.

    Raises:
        ValueError: the scope matches lexically (its keys are not made here).
    """

    def __init__(self, scope: Scope, partition: str = "") -> None:
        if scope.uses_lexical or not scope.uses_embedding:
            raise ValueError("the vectorised fill signs embedding-only scopes")
        self.matching = matching_settings(scope)
        self.params = simhash_params()
        self.scope = scope
        self.embedder = get_embedder().name
        layout = self.matching.embedding_layout
        self.prefix = band_prefix(embedding_namespace(partition, self.embedder), layout)
        # Each band's key for each value its bits can take, hashed the first time a value is
        # met (a 17-bit band has 131,072 values, however many questions are signed).
        self.band_tables = np.zeros((layout.bands, 1 << layout.rows), dtype=np.int64) if layout.rows <= 20 else None
        self.band_known = np.zeros((layout.bands, 1 << layout.rows), dtype=bool) if layout.rows <= 20 else None

    def sign(self, texts: list[str], vectors: np.ndarray) -> SignedBlock:
        """The keys and sketches of the questions (an embedding-only scope keeps no MinHash signature)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        return SignedBlock(
            keys=self._band_keys(_bits(vectors, self.params)),
            sketch=_sketches(_bits(vectors, sketch_params(self.params))),
        )

    def _band_keys(self, bits: np.ndarray) -> np.ndarray:
        """`band_keys` of every row, each distinct band value hashed once."""
        layout = self.matching.embedding_layout
        rows = layout.rows
        keys = np.empty((bits.shape[0], layout.bands), dtype=np.int64)
        weights = np.left_shift(1, np.arange(rows, dtype=np.int64))
        for band in range(layout.bands):
            part = np.ascontiguousarray(bits[:, band * rows : (band + 1) * rows])
            if self.band_tables is None:  # too wide for a table: the block's distinct values
                _, first, inverse = np.unique(part, axis=0, return_index=True, return_inverse=True)
                keys[:, band] = np.fromiter(
                    (band_key(self.prefix, band, part[i].tobytes()) for i in first), dtype=np.int64, count=len(first)
                )[inverse.reshape(-1)]
                continue
            values = part.astype(np.int64) @ weights
            fresh = ~self.band_known[band, values]
            new, first = np.unique(values[fresh], return_index=True)
            if new.size:
                unknown = np.flatnonzero(fresh)[first]
                self.band_tables[band, new] = np.fromiter(
                    (band_key(self.prefix, band, part[i].tobytes()) for i in unknown), dtype=np.int64, count=new.size
                )
                self.band_known[band, new] = True
            keys[:, band] = self.band_tables[band, values]
        return keys


def _bits(vectors: np.ndarray, params: SimHashParams) -> np.ndarray:
    projections = vectors @ _hyperplanes(params)
    bits = (projections >= 0).astype(np.uint8)
    for row in np.flatnonzero((np.abs(projections) < _ROUNDING_MARGIN).any(axis=1)):
        bits[row] = simhash_bits(vectors[row], params)
    return bits


def _sketches(bits: np.ndarray) -> np.ndarray:
    """The sketch bits as two signed big-endian 64-bit integers a row (as `simhash.sketch`)."""
    packed = np.packbits(bits, axis=1)  # (n, 16) bytes, first bit highest
    return np.ascontiguousarray(packed).view(">i8").astype(np.int64)


def store_block(
    signer: BlockSigner,
    texts: list[str],
    vectors: np.ndarray,
    signed: SignedBlock,
    cited: list[list[str]],
    current: dict[str, Section],
    now: datetime,
) -> list[int]:
    """Stores accepted trails in the signer's scope, the i-th asking texts[i] (its vector
    vectors[i], signed as signed[i]) and citing cited[i] after one search step, as
    `evaluation.scale.store_trails` would; returns their ids. PostgreSQL only."""
    if connection.vendor != "postgresql":
        raise ValueError("the vectorised fill writes with PostgreSQL's COPY")
    scope, matching = signer.scope, signer.matching
    # The rows record() would write for an accepted trail: its status and expiry from the lifecycle table.
    accepted = Trail.start(scope, signalled=True, now=now)
    trail_columns = {
        "partition": "",
        "status": accepted.status,
        "signal": "accepted",
        "reason": accepted.reason,
        "lexical_params": matching.minhash.label,
        "band_layout": matching.lexical_layout.label,
        "embedding_model": signer.embedder,
        "created_at": now,
        "expires_at": accepted.expires_at,
        "request_fingerprint": "",
        "scope_id": scope.id,
    }
    with bulk_transaction(), connection.cursor() as cursor:
        _skip_reference_checks(cursor)
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [Trail._meta.db_table, len(texts)],
        )
        ids = [row[0] for row in cursor.fetchall()]
        raw = cursor.cursor
        fields = list(Trail._meta.concrete_fields)
        with raw.copy(copy_statement(Trail, [f.column for f in fields])) as copy:
            for i, text in enumerate(texts):
                given = {
                    **trail_columns,
                    "id": ids[i],
                    "public_id": uuid.uuid4(),
                    "query": text,
                    "normalised_query": normalise_query(text),
                    "lexical_signature": b"",
                    "embedding": encode_vector(vectors[i]),
                }
                copy.write_row([given[f.attname] if f.attname in given else _default(f) for f in fields])
        with raw.copy(
            copy_statement(Step, ["trail_id", "scope_id", "position", "tool", "args", "section_ids"])
        ) as copy:
            for trail_id, text, sections in zip(ids, texts, cited):
                copy.write_row([trail_id, scope.id, 0, "search", json.dumps({"query": text}), json.dumps(sections)])
        with raw.copy(copy_statement(Citation, ["trail_id", "scope_id", "position", "section_id", "hash"])) as copy:
            for trail_id, sections in zip(ids, cited):
                for position, section_id in enumerate(dict.fromkeys(sections)):
                    copy.write_row([trail_id, scope.id, position, section_id, current[section_id].hash])
        with raw.copy(
            copy_statement(TrailSignal, ["trail_id", "scope_id", "signal", "source", "by", "reason", "created_at"])
        ) as copy:
            for trail_id in ids:
                copy.write_row([trail_id, scope.id, "accepted", TrailSignal.Source.RECORD.value, "", "", now])
        with raw.copy(
            copy_statement(BandKeys, ["trail_id", "scope_id", "keys", "sketch_high", "sketch_low"])
            + " WITH (FORMAT binary)"
        ) as copy:
            copy.write(_binary_band_keys(np.asarray(ids, dtype=np.int64), scope.id, signed))
    return ids


def _skip_reference_checks(cursor) -> None:
    """Skips the foreign-key checks of this transaction's rows where the role may (a superuser's).

    The keys are deferred: at a million trails, checking the 33 million rows' references at
    commit took longer than writing them. Every reference here is to a trail written in
    this transaction or to the scope, so a check could not fail; these tables have no
    triggers of their own that the setting would also skip. A role that may not skip them
    keeps them (the fill is only slower).
    """
    try:
        with transaction.atomic():
            cursor.execute("SET LOCAL session_replication_role = replica")
    except DatabaseError:
        pass


def _binary_band_keys(ids: np.ndarray, scope_id: int, signed: SignedBlock) -> bytes:
    """Every (trail, scope, keys, sketch high, sketch low) row in COPY's binary format, built
    in numpy: the keys XOR the scope's salt, as a one-dimensional BIGINT array."""
    count, bands = signed.keys.shape
    element = np.dtype([("length", ">i4"), ("value", ">i8")])
    array = np.dtype(
        [
            ("ndim", ">i4"),
            ("flags", ">i4"),
            ("type", ">i4"),
            ("size", ">i4"),
            ("lower", ">i4"),
            ("items", element, (bands,)),
        ]
    )
    # Each row: a 16-bit field count, then each field as a 32-bit length and its value.
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("trail_length", ">i4"),
            ("trail", ">i8"),
            ("scope_length", ">i4"),
            ("scope", ">i8"),
            ("keys_length", ">i4"),
            ("keys", array),
            ("high_length", ">i4"),
            ("high", ">i8"),
            ("low_length", ">i4"),
            ("low", ">i8"),
        ]
    )
    rows = np.zeros(count, dtype=row)
    rows["fields"] = 5
    for name in ("trail", "scope", "high", "low"):
        rows[f"{name}_length"] = 8
    rows["trail"], rows["scope"] = ids, scope_id
    rows["keys_length"] = array.itemsize
    keys = rows["keys"]
    keys["ndim"], keys["type"], keys["size"], keys["lower"] = 1, _INT8_OID, bands, 1
    keys["items"]["length"] = 8
    keys["items"]["value"] = signed.keys ^ np.int64(scope_salt(scope_id))
    rows["high"], rows["low"] = signed.sketch[:, 0], signed.sketch[:, 1]
    out = io.BytesIO()
    out.write(b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big"))
    out.write(rows.tobytes())
    out.write((-1).to_bytes(2, "big", signed=True))
    return out.getvalue()


# PostgreSQL's type oid of BIGINT, an array's element type in the binary format.
_INT8_OID = 20


def _default(field):
    if field.has_default():
        return field.get_default()
    if field.db_default is not NOT_PROVIDED:
        return getattr(field.db_default, "value", field.db_default)
    if field.null:
        return None
    raise ValueError(f"no value for {field.model.__name__}.{field.attname}")


def copy_statement(model, columns: list[str]) -> str:
    return f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN"
