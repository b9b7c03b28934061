"""Decode a submitted body into items, enforcing every limit before anything is stored (pure)."""

from __future__ import annotations

import itertools
import json
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shared.core.errors import LimitExceeded, MalformedRequest, UnsupportedMediaType
from shared.core.settings import Settings

JSON_TYPES = frozenset({"application/json", "text/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"})
# Below this many decompressed bytes the ratio test is not applied: tiny repetitive bodies compress well legitimately.
GZIP_RATIO_FLOOR_BYTES = 1 << 20
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# Decoding runs on a thread; every this many items it lets go of the interpreter lock (sleep(0)), so the event
# loop waits about a millisecond for it, not the 5 ms switch interval times every decoding thread.
YIELD_EVERY = 64


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int
    max_items: int
    max_item_bytes: int
    max_json_depth: int
    max_gzip_ratio: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            max_body_bytes=settings.max_body_bytes,
            max_items=settings.max_items,
            max_item_bytes=settings.max_item_bytes,
            max_json_depth=settings.max_json_depth,
            max_gzip_ratio=settings.max_gzip_ratio,
        )


@dataclass(frozen=True)
class Intake:
    """The accepted items, each as its compact JSON text, with their total encoded size."""

    items: list[str]
    encoded_bytes: int


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def possible_size(body_bytes: int, content_encoding: str | None, limits: Limits) -> int:
    """The most bytes this body may decode to, before decoding it: its own size, or for gzip what the ratio
    limit lets it inflate to (the ratio applies from GZIP_RATIO_FLOOR_BYTES on), at most MAX_BODY_BYTES."""
    if (content_encoding or "identity").strip().lower() == "identity":
        return body_bytes
    return min(limits.max_body_bytes + 1, max(GZIP_RATIO_FLOOR_BYTES, body_bytes * limits.max_gzip_ratio))


def decode_body(body: bytes, *, content_type: str | None, content_encoding: str | None, limits: Limits) -> Intake:
    kind = media_type(content_type)
    if kind not in JSON_TYPES and kind not in NDJSON_TYPES:
        raise UnsupportedMediaType(
            f"Content-Type must be application/json or application/x-ndjson, not {kind or 'missing'!r}",
            supported=sorted(JSON_TYPES | NDJSON_TYPES),
        )
    raw = decompress(body, content_encoding, limits)
    if len(raw) > limits.max_body_bytes:
        raise LimitExceeded(
            f"body is {len(raw)} bytes, more than MAX_BODY_BYTES", limit="MAX_BODY_BYTES", maximum=limits.max_body_bytes
        )
    # NDJSON is decoded a line at a time, so the body's text never exists whole next to its bytes and items.
    items = parse_ndjson(raw, limits) if kind in NDJSON_TYPES else parse_json(utf8(raw, 0), limits)
    return Intake(items=items, encoded_bytes=sum(len(i) for i in items))


def utf8(raw: bytes, offset: int) -> str:
    """`raw` (found at byte `offset` of the body) as text, or the 400 that names the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedRequest(f"body is not valid UTF-8 (byte {offset + e.start})") from None


def decompress(body: bytes, content_encoding: str | None, limits: Limits) -> bytes:
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in {"gzip", "x-gzip"}:
        raise UnsupportedMediaType(f"Content-Encoding {encoding!r} is not supported (gzip or identity)")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        # One byte past the limit is enough to know it was broken; a bomb never inflates further.
        out = inflater.decompress(body, limits.max_body_bytes + 1)
    except zlib.error as e:
        raise MalformedRequest(f"body is not valid gzip ({e})") from None
    if len(out) > limits.max_body_bytes:
        raise LimitExceeded(
            "decompressed body is larger than MAX_BODY_BYTES", limit="MAX_BODY_BYTES", maximum=limits.max_body_bytes
        )
    if not inflater.eof:
        raise MalformedRequest("gzip body is truncated")
    if inflater.unused_data:
        raise MalformedRequest("gzip body has trailing data after the first member")
    if len(out) >= GZIP_RATIO_FLOOR_BYTES and len(out) > limits.max_gzip_ratio * max(1, len(body)):
        raise LimitExceeded(
            f"gzip body inflates {len(out) // max(1, len(body))}x, more than MAX_GZIP_RATIO",
            limit="MAX_GZIP_RATIO",
            maximum=limits.max_gzip_ratio,
        )
    return out


def json_depth(text: str) -> int:
    """Deepest nesting of arrays/objects in JSON text (strings, which may hold brackets, are skipped). The walk
    runs in C (regex, map, accumulate): about 25 ms per MB of brackets, so even a deep body checked on the event
    loop holds it only briefly."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets), initial=0))


def check_depth(text: str, limits: Limits, *, extra: int = 0, where: str = "body") -> None:
    depth = json_depth(text)
    if depth - extra > limits.max_json_depth:
        raise LimitExceeded(
            f"{where} nests {depth - extra} levels deep, more than MAX_JSON_DEPTH",
            limit="MAX_JSON_DEPTH",
            maximum=limits.max_json_depth,
            status=400,
        )


def loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise MalformedRequest(f"{where} nests too deeply to parse") from None
    except ValueError as e:
        raise MalformedRequest(f"{where} is not valid JSON: {e}") from None


def encode_item(item: Any) -> str:
    # ASCII-escaped: queue messages travel in an XML body, and sizes are then exact byte counts.
    return json.dumps(item, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


_DECODER = json.JSONDecoder()
SMALL_TEXT = 64 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def parse_json(text: str, limits: Limits) -> list[str]:
    """`{"items": [...]}`, decoded item by item: the item-count, item-size and depth limits hold while it is
    read (a refused body stops at the first item past a limit), no single call holds the interpreter for the
    whole body, and only one item's Python objects exist at a time."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        _valid_if_small(text, limits)
        raise MalformedRequest('body must be a JSON object with an "items" array')
    pos = _skip(text, pos + 1)
    items: list[str] | None = None
    while not text.startswith("}", pos):
        key, pos = _decode(text, pos, "body", limits)
        if not isinstance(key, str):
            raise MalformedRequest('body must be a JSON object with an "items" array')
        if key != "items":
            _valid_if_small(text, limits)  # invalid JSON is named first, as a whole-body parse would
            if items is None:
                raise MalformedRequest(f'body must be a JSON object with an "items" array, not {key[:64]!r}')
            raise MalformedRequest(f"unknown top-level field(s): {key[:64]}")
        if items is not None:
            raise MalformedRequest('"items" appears twice')
        pos = _expect(text, _skip(text, pos), ":")
        items, pos = _items(text, _skip(text, pos), limits)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif not text.startswith("}", pos):
            raise MalformedRequest(f"body is not valid JSON: expected ',' or '}}' at character {pos}")
    if _skip(text, pos + 1) != len(text):
        raise MalformedRequest(f"body is not valid JSON: extra data at character {_skip(text, pos + 1)}")
    if items is None:
        raise MalformedRequest('body must be a JSON object with an "items" array')
    check_count(len(items), limits)
    return items


def _items(text: str, pos: int, limits: Limits) -> tuple[list[str], int]:
    if not text.startswith("[", pos):
        value, _ = _decode(text, pos, "body", limits)
        raise MalformedRequest(f'"items" must be an array, not {type(value).__name__}')
    items: list[str] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return items, pos + 1
    while True:
        if len(items) >= limits.max_items:
            check_count(len(items) + 1, limits)
        if not len(items) % YIELD_EVERY:
            time.sleep(0)
        item, end = _decode(text, pos, f"item {len(items)}", limits)
        # `{"items": [...]}` adds two levels around each item.
        check_depth(text[pos:end], limits, where=f"item {len(items)}")
        try:
            items.append(checked_item(encode_item(item), len(items), limits))
        except ValueError as e:  # NaN/Infinity sneak in through Python's lenient parser
            raise MalformedRequest(f"items contain a value JSON cannot carry: {e}") from None
        pos = _skip(text, end)
        if text.startswith("]", pos):
            return items, pos + 1
        pos = _skip(text, _expect(text, pos, ","))


def _valid_if_small(text: str, limits: Limits) -> None:
    """Raise 'not valid JSON' for a small body that is not JSON at all (a large one is not parsed whole just
    to name its error: its first shape error is named instead)."""
    if len(text) <= SMALL_TEXT:
        check_depth(text, limits)
        loads(text, "body")


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _expect(text: str, pos: int, char: str) -> int:
    if not text.startswith(char, pos):
        raise MalformedRequest(f"body is not valid JSON: expected {char!r} at character {pos}")
    return pos + 1


def _decode(text: str, pos: int, where: str, limits: Limits) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        raise LimitExceeded(
            f"{where} nests too deeply to parse, more than MAX_JSON_DEPTH",
            limit="MAX_JSON_DEPTH",
            maximum=limits.max_json_depth,
            status=400,
        ) from None
    except ValueError as e:
        raise MalformedRequest(f"body is not valid JSON: {e}") from None


def parse_ndjson(raw: bytes, limits: Limits) -> list[str]:
    items: list[str] = []
    # Lines end at "\n" only: splitlines() would also cut at U+2028, U+0085, \x1e..., which JSON strings may hold.
    # One line at a time (a list of every line first would cost tens of bytes per line more than the body).
    for line_no, (offset, line) in enumerate(_lines(raw), start=1):
        if not line.strip(b" \t\r"):  # JSON whitespace only
            continue
        if len(items) >= limits.max_items:
            check_count(len(items) + 1, limits)
        if not len(items) % YIELD_EVERY:
            time.sleep(0)
        text = utf8(line, offset)
        check_depth(text, limits, where=f"line {line_no}")
        item = loads(text, f"line {line_no}")
        try:
            items.append(checked_item(encode_item(item), len(items), limits))
        except ValueError as e:
            raise MalformedRequest(f"line {line_no} holds a value JSON cannot carry: {e}") from None
    check_count(len(items), limits)
    return items


def _lines(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """Each line of `raw` with the byte offset it starts at."""
    start = 0
    while True:
        end = raw.find(b"\n", start)
        if end < 0:
            yield start, raw[start:]
            return
        yield start, raw[start:end]
        start = end + 1


def check_count(count: int, limits: Limits) -> None:
    if count == 0:
        raise MalformedRequest("the batch has no items")
    if count > limits.max_items:
        raise LimitExceeded(
            f"the batch has more than MAX_ITEMS ({limits.max_items}) items", limit="MAX_ITEMS", maximum=limits.max_items
        )


def checked_item(encoded: str, index: int, limits: Limits) -> str:
    size = len(encoded)  # ASCII: characters are bytes
    if size > limits.max_item_bytes:
        raise LimitExceeded(
            f"item {index} is {size} bytes, more than MAX_ITEM_BYTES",
            limit="MAX_ITEM_BYTES",
            maximum=limits.max_item_bytes,
            item=index,
        )
    return encoded
