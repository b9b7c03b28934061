"""The work-queue message: a chunk inline, inline compressed, or a claim-check reference to a blob (pure).

Wire form (compact JSON, ASCII-safe for the queue's XML body):
    {"v":1,"b":batch,"a":attempt,"c":chunk,"g":gen,"s":skips?,"i":[positions]?,"t":traceparent?,
     "x":expires_ms?,"n":not_before_ms?,"f":max_failed_fraction?, <body>}
where <body> is one of "items":[...] (inline), "z":"<base64 gzip of the items array>" (inline, compressed)
or "blob":"<name in the batches container>" (claim check). "i" lists, for a retry, which positions of the
chunk the message still carries; without it the message carries the whole chunk. "t" is the W3C traceparent of
the submit that created the chunk (shared.telemetry.tracing); messages written before it existed have none and decode
the same, and a malformed one is ignored, never a reason to refuse a chunk.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared.batch.batches import is_batch_id
from shared.core import fastjson
from shared.core.errors import MalformedEnvelope
from shared.core.settings import INLINE_MAX_BYTES
from shared.telemetry.tracing import TRACEPARENT

VERSION = 1
GZIP_LEVEL = 6


@dataclass(frozen=True)
class ChunkHeader:
    batch_id: str
    attempt: str  # the submission attempt that enqueued the chunk
    chunk: int
    gen: int = 0  # how many times failed items were re-enqueued
    skips: int = 0  # receives that did not count as processing attempts
    positions: tuple[int, ...] | None = None  # positions within the chunk carried (None: all)
    trace: str | None = None  # the submit's traceparent
    # The batch's lifecycle (`shared.batch.lifecycle`), carried so that admission needs no manifest read for it.
    expires_ms: int | None = None  # epoch ms after which its items are recorded `expired`, not run
    not_before_ms: int | None = None  # epoch ms before which it is not run
    max_failed: float | None = None  # the batch's max_failed_fraction
    start: int | None = None  # the position in its batch of the chunk's first item (None: enqueued before it was sent)
    # The dequeue count of the delivery that rewrote the message to this text (0: as it was sent). A delivery whose
    # dequeue count is past this one's next follows a delivery that left the text as it was: it may have recorded
    # the chunk's lineage and lost its update or delete (`shared.engine.chunks.ChunkWork.recorded`).
    delivered: int = 0

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": VERSION, "b": self.batch_id, "a": self.attempt, "c": self.chunk, "g": self.gen}
        if self.skips:
            out["s"] = self.skips
        if self.positions is not None:
            out["i"] = list(self.positions)
        if self.trace is not None:
            out["t"] = self.trace
        for key, value in (
            ("x", self.expires_ms),
            ("n", self.not_before_ms),
            ("f", self.max_failed),
            ("o", self.start),
            ("d", self.delivered or None),
        ):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class ChunkMessage:
    """A decoded work-queue message: the header plus either its items or the claim-check blob name."""

    header: ChunkHeader
    items: list[Any] | None = None
    blob: str | None = None

    def positions(self, count: int) -> list[int]:
        return list(self.header.positions) if self.header.positions is not None else list(range(count))


def _header_json(header: ChunkHeader) -> str:
    return json.dumps(header.fields(), separators=(",", ":"))[:-1]  # open object, body follows


def encode_inline(header: ChunkHeader, items_json: Sequence[str], *, max_bytes: int = INLINE_MAX_BYTES) -> str | None:
    """The message text carrying the items inline (compressed if need be), or None if it cannot fit.
    `items_json` must be ASCII-escaped JSON (`encode_items`, or the intake's encoding)."""
    array = "[" + ",".join(items_json) + "]"
    plain = _header_json(header) + ',"items":' + array + "}"
    if len(plain) <= max_bytes:
        return plain
    packed = base64.b64encode(gzip.compress(array.encode("utf-8"), GZIP_LEVEL, mtime=0)).decode("ascii")
    compressed = _header_json(header) + ',"z":"' + packed + '"}'
    return compressed if len(compressed) <= max_bytes else None


def encode_reference(header: ChunkHeader, blob: str) -> str:
    return _header_json(header) + ',"blob":' + json.dumps(blob) + "}"


def encode_claim_check(items_json: Sequence[str]) -> bytes:
    return gzip.compress(("[" + ",".join(items_json) + "]").encode("utf-8"), GZIP_LEVEL, mtime=0)


def decode_claim_check(data: bytes) -> list[Any]:
    try:
        items = fastjson.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as e:
        raise MalformedEnvelope(f"claim-check blob is not gzip JSON: {e}") from e
    if not isinstance(items, list):
        raise MalformedEnvelope("claim-check blob does not hold an array")
    return items


def decode(text: str) -> ChunkMessage:
    try:
        doc = fastjson.loads(text)
    except ValueError as e:
        raise MalformedEnvelope(f"message is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        raise MalformedEnvelope("message is not a version-1 chunk envelope")
    header = _decode_header(doc)
    if "items" in doc:
        if not isinstance(doc["items"], list):
            raise MalformedEnvelope('"items" is not an array')
        return ChunkMessage(header, items=doc["items"])
    if "z" in doc:
        try:
            items = fastjson.loads(gzip.decompress(base64.b64decode(doc["z"], validate=True)))
        except (OSError, EOFError, ValueError, TypeError) as e:
            raise MalformedEnvelope(f'"z" is not base64 gzip JSON: {e}') from None
        if not isinstance(items, list):
            raise MalformedEnvelope('"z" does not hold an array')
        return ChunkMessage(header, items=items)
    if isinstance(doc.get("blob"), str):
        return ChunkMessage(header, blob=doc["blob"])
    raise MalformedEnvelope("message has no items, z or blob")


def _decode_header(doc: dict[str, Any]) -> ChunkHeader:
    batch_id, attempt, chunk, gen, skips = doc.get("b"), doc.get("a"), doc.get("c"), doc.get("g", 0), doc.get("s", 0)
    if not isinstance(batch_id, str) or not is_batch_id(batch_id):
        raise MalformedEnvelope("bad batch id")
    if not isinstance(attempt, str) or not attempt:
        raise MalformedEnvelope("bad attempt")
    if not (_count(chunk) and _count(gen) and _count(skips)):
        raise MalformedEnvelope("chunk, gen and skips must be non-negative integers")
    assert isinstance(chunk, int)
    assert isinstance(gen, int)
    assert isinstance(skips, int)
    positions = doc.get("i")
    if positions is not None and not (
        isinstance(positions, list) and all(isinstance(p, int) and p >= 0 for p in positions)
    ):
        raise MalformedEnvelope('"i" must be a list of positions')
    carried = doc.get("t")
    trace = carried if isinstance(carried, str) and TRACEPARENT.match(carried) else None
    expires_ms, not_before_ms, max_failed = doc.get("x"), doc.get("n"), doc.get("f")
    if not all(v is None or _count(v) for v in (expires_ms, not_before_ms)):
        raise MalformedEnvelope('"x" and "n" must be epoch milliseconds')
    if max_failed is not None and (not isinstance(max_failed, int | float) or isinstance(max_failed, bool)):
        raise MalformedEnvelope('"f" must be a number')
    start, delivered = doc.get("o"), doc.get("d", 0)
    if start is not None and not _count(start):
        raise MalformedEnvelope('"o" must be a position')
    if not _count(delivered):
        raise MalformedEnvelope('"d" must be a dequeue count')
    return ChunkHeader(
        batch_id,
        attempt,
        chunk,
        gen,
        skips,
        tuple(positions) if positions is not None else None,
        trace,
        expires_ms,
        not_before_ms,
        float(max_failed) if max_failed is not None else None,
        start,
        delivered,
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def select(items: Sequence[Any], positions: Sequence[int]) -> list[Any]:
    """The items at `positions` of a claim-check chunk (a retry carries only some of them)."""
    try:
        return [items[p] for p in positions]
    except IndexError:
        raise MalformedEnvelope("a position lies outside the claim-check chunk") from None


def retry_header(header: ChunkHeader, positions: Sequence[int]) -> ChunkHeader:
    """The header of the message that carries only the items still to retry."""
    return replace(header, gen=header.gen + 1, positions=tuple(positions))


def skipped_header(header: ChunkHeader) -> ChunkHeader:
    return replace(header, skips=header.skips + 1)


def encode_items(items: Sequence[Any]) -> list[str]:
    return [json.dumps(i, ensure_ascii=True, separators=(",", ":")) for i in items]
