"""The catalogue of hostile requests (pure data): each names what it sends and what the answer must say.

Every case must be refused with `status` and a JSON error whose text (message, or the limit it names)
contains `names`, case-insensitively. None of them may store or enqueue anything.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

from tests.hostile.conftest import MAX_BODY_BYTES, MAX_ITEM_BYTES, MAX_ITEMS, MAX_JSON_DEPTH

JSON = {"Content-Type": "application/json"}
NDJSON = {"Content-Type": "application/x-ndjson"}
BATCHES = "/api/batches"
REPLAY = "/api/poison/replay"
VALID = b'{"items": [{"id": "x"}]}'


@dataclass(frozen=True)
class Bad:
    name: str
    status: int
    names: str
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(JSON))
    method: str = "POST"
    path: str = BATCHES


def items_json(*items: str) -> bytes:
    return ('{"items": [' + ", ".join(items) + "]}").encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9)


def invalid_json() -> list[Bad]:
    bodies = [
        b"{", b"}", b"[", b"{items: [1]}", b"{'items': [1]}", b'{"items": [1,]}', b'{"items": [1]',
        b'{"items": [1]}}', b'{"items": [1]} trailing', b"nul", b"tru", b'{"items": [01]}', b'{"items": ["\x01"]}',
        b'{"items": ["\\x41"]}', b'{"items": [1 2]}', b'{"items": [true false]}', b'{"items": ["open]}',
        b'{"items": ["\\q"]}', b'{"items": [+1]}', b'{"items": [.5]}', b'{"items": [0x10]}',
        b'{"items": [undefined]}', b'{"items": [/* c */ 1]}', b'{"items": [1]} // c', b'{"items": [1]}\x00',
        b'\xef\xbb\xbf{"items": [1]}', b'{"items": [1e5.5]}', b'{"items": [-]}', b'{"items": ["a" "b"]}',
        b'{"items" [1]}', b'{"items": [{"a" 1}]}', b'{"items": [{"a": 1,}]}', b'{"items": [{1: 2}]}',
    ]  # fmt: skip
    out = [Bad(f"invalid JSON {b[:24]!r}", 400, "not valid JSON", b) for b in bodies]
    # Python reads these, but JSON cannot carry them.
    out += [Bad(f"non-JSON number {v}", 400, "cannot carry", items_json(v)) for v in ("NaN", "Infinity", "-Infinity")]
    out += [Bad("overflowing number 1e999", 400, "cannot carry", items_json("1e999"))]
    out.append(Bad("a 5000-digit integer", 400, "not valid JSON", items_json("1" + "0" * 5000)))
    return out


def wrong_shapes() -> list[Bad]:
    shaped = ["[1, 2]", "1", '"items"', "null", "true", "{}", '{"item": [1]}', '{"Items": [1]}']
    out = [Bad(f"top level {s}", 400, '"items" array', s.encode()) for s in shaped]
    for value in ("1", '"abc"', "null", "{}", "true", "1.5", '{"0": 1}'):
        out.append(Bad(f"items is {value}", 400, '"items" must be an array', f'{{"items": {value}}}'.encode()))
    out.append(Bad("no items", 400, "no items", b'{"items": []}'))
    out.append(Bad("an unknown field", 400, "unknown top-level", b'{"items": [1], "priority": "high"}'))
    out.append(Bad("many unknown fields", 400, "unknown top-level", b'{"items": [1], "a": 1, "b": 2, "c": 3}'))
    for key in ("", "k" * 257, "tab\there", "caf\u00e9", "nb\u00a0sp"):
        headers = {**JSON, "Idempotency-Key": key}
        out.append(Bad(f"Idempotency-Key {key[:12]!r}", 400, "Idempotency-Key", VALID, headers))
    return out


def bad_replays() -> list[Bad]:
    bodies = {
        b"{": "not valid JSON", b"[1]": "optional", b'"all"': "optional", b"null": "optional",
        b'{"limit": 0}': "limit", b'{"limit": "5"}': "limit", b'{"limit": true}': "limit",
        b'{"limit": 10001}': "limit", b'{"limit": 1.5}': "limit", b'{"limit": -1}': "limit",
        b'{"message_ids": "x"}': "message_ids", b'{"message_ids": [1]}': "message_ids",
        b'{"message_ids": {"a": 1}}': "message_ids",
        json.dumps({"message_ids": [str(n) for n in range(1001)]}).encode(): "message_ids",
        b'{"batch_id": 5}': "batch_id", b'{"batch_id": ["a"]}': "batch_id", b'{"batch_id": {}}': "batch_id",
        b'{"everything": true}': "optional", b'{"batch_id": "a", "force": 1}': "optional",
        b"\xff\xfe": "not valid JSON",
    }  # fmt: skip
    return [Bad(f"replay {b[:24]!r}", 400, names, b, path=REPLAY) for b, names in bodies.items()]


def invalid_ndjson() -> list[Bad]:
    bodies = [
        b'{"a": 1}\n{bad}', b'{"a": 1}\n{"b":', b'{"a": 1}{"b": 2}', b"1 2", b"[1, 2", b'{"a": 1}\n\x00',
        b'{"a": 1}\nNaN-ish', b'{"a": 1}\r\n{"b"\r\n', b"'single'", b'{"a": 1}\n]', b"{\n}", b'"open\n"',
        b"\x1e{}", b'{"a": 1}\n{"a": 1}\n{"a": }', b"true false", b'{"a": undefined}', b"--", b"{}}",
    ]  # fmt: skip
    out = [Bad(f"invalid NDJSON {b[:24]!r}", 400, "not valid JSON", b, NDJSON) for b in bodies]
    out.append(Bad("NDJSON NaN line", 400, "cannot carry", b'{"a": 1}\nNaN', NDJSON))
    for blank in (b"", b"\n", b"\n\n\n", b"   \n\t\n", b"\r\n\r\n"):
        out.append(Bad(f"NDJSON blank {blank!r}", 400, "no items", blank, NDJSON))
    out.append(Bad("NDJSON sent as JSON", 400, "not valid JSON", b'{"a": 1}\n{"b": 2}'))
    return out


def deep_nesting() -> list[Bad]:
    over = MAX_JSON_DEPTH + 1
    out = []
    for depth in (over, 100, 1000, 100_000):
        out.append(Bad(f"arrays {depth} deep", 400, "MAX_JSON_DEPTH", items_json("[" * depth + "]" * depth)))
        out.append(Bad(f"NDJSON line {depth} deep", 400, "MAX_JSON_DEPTH", b"[" * depth + b"]" * depth, NDJSON))
    out.append(Bad("objects too deep", 400, "MAX_JSON_DEPTH", items_json('{"a": ' * over + "1" + "}" * over)))
    out.append(Bad("unclosed arrays", 400, "MAX_JSON_DEPTH", b"[" * 200_000, NDJSON))
    out.append(Bad("unclosed objects", 400, "MAX_JSON_DEPTH", items_json('{"a":' * 50_000)))
    mixed = '[{"a": ' * (over // 2 + 1) + "1" + "}]" * (over // 2 + 1)
    out.append(Bad("mixed nesting", 400, "MAX_JSON_DEPTH", items_json(mixed)))
    return out


def huge_strings() -> list[Bad]:
    just_over = "x" * MAX_ITEM_BYTES
    return [
        Bad("a string past MAX_ITEM_BYTES", 413, "MAX_ITEM_BYTES", items_json(json.dumps(just_over))),
        Bad("a 3 MB string", 413, "MAX_ITEM_BYTES", items_json(json.dumps("y" * 3_000_000))),
        Bad("an NDJSON 1 MB string", 413, "MAX_ITEM_BYTES", json.dumps({"s": "z" * 2**20}).encode(), NDJSON),
        Bad("escapes that grow", 413, "MAX_ITEM_BYTES", items_json(json.dumps("\u00e9" * (MAX_ITEM_BYTES // 4)))),
        Bad("a huge key", 413, "MAX_ITEM_BYTES", items_json(json.dumps({"k" * 20_000: 1}))),
        Bad("the second item too big", 413, "MAX_ITEM_BYTES", items_json("1", json.dumps(just_over))),
        Bad("control chars escaped", 413, "MAX_ITEM_BYTES", items_json(json.dumps("\x01" * MAX_ITEM_BYTES))),
    ]


def gzip_attacks() -> list[Bad]:
    zipped = {**JSON, "Content-Encoding": "gzip"}
    bomb = gz(b'{"items": ["' + b"0" * (64 * 2**20) + b'"]}')  # 64 MiB inflated, about 64 KiB sent
    ratio_bomb = gz(b'{"items": ["' + b"0" * (3 * 2**20) + b'"]}')  # under the size limit, 1000x
    valid = gz(VALID)
    out = [
        Bad("a gzip bomb", 413, "MAX_BODY_BYTES", bomb, zipped),
        Bad("an x-gzip bomb", 413, "MAX_BODY_BYTES", bomb, {**JSON, "Content-Encoding": "x-gzip"}),
        Bad("a gzip bomb of NDJSON", 413, "MAX_BODY_BYTES", bomb, {**NDJSON, "Content-Encoding": "gzip"}),
        Bad("a ratio bomb", 413, "MAX_GZIP_RATIO", ratio_bomb, zipped),
        Bad("gzip inside gzip", 400, "UTF-8", gz(bomb), zipped),
        Bad("not gzip at all", 400, "not valid gzip", VALID, zipped),
        Bad("truncated gzip", 400, "truncated", valid[: len(valid) // 2], zipped),
        Bad("gzip with trailing data", 400, "trailing data", valid + b"junk", zipped),
        Bad("two gzip members", 400, "trailing data", valid + valid, zipped),
        Bad("an empty gzip body", 400, "truncated", b"", zipped),
        Bad("gzip of invalid JSON", 400, "not valid JSON", gz(b'{"items": [1,]}'), zipped),
        Bad("gzip of latin-1", 400, "UTF-8", gz(b'{"items": ["\xe9"]}'), zipped),
        Bad("gzip with a broken CRC", 400, "gzip", valid[:-8] + b"\0\0\0\0" + valid[-4:], zipped),
    ]
    for encoding in ("br", "deflate", "compress", "gzip, gzip", "*", "zstd"):
        headers = {**JSON, "Content-Encoding": encoding}
        out.append(Bad(f"Content-Encoding {encoding}", 415, "Content-Encoding", VALID, headers))
    return out


def wrong_content_types() -> list[Bad]:
    kinds = [
        "text/plain", "text/html", "application/xml", "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded", "application/octet-stream", "application/json-patch+json",
        "application", "", ";;;", "application/jsonx", "json", "APPLICATION/XML", "*/*", "image/png",
        "text/csv", "application/problem+json", "application/vnd.api+json",
    ]  # fmt: skip
    out = [Bad(f"Content-Type {k!r}", 415, "Content-Type", VALID, {"Content-Type": k}) for k in kinds]
    out.append(Bad("no Content-Type", 415, "missing", VALID, {}))
    out.append(Bad("no Content-Type, no body", 415, "missing", None, {}))
    return out


def empty_and_not_utf8() -> list[Bad]:
    bodies = {
        b'{"items": ["\xff"]}': "UTF-8", b'{"items": ["\xe9t\xe9"]}': "UTF-8", b'{"items": ["\xc0\xaf"]}': "UTF-8",
        b'{"items": ["\xed\xa0\x80"]}': "UTF-8", b'{"items": ["\xe2\x82"]}': "UTF-8",
        '{"items": [1]}'.encode("utf-16"): "UTF-8", '{"items": [1]}'.encode("utf-32"): "UTF-8",
        b"\x80": "UTF-8", b'{"items": ["\xf8\x88\x80\x80\x80"]}': "UTF-8",
        b"": "not valid JSON", b" ": "not valid JSON", b"\n\t\r ": "not valid JSON",
    }  # fmt: skip
    out = [Bad(f"body {b[:16]!r}", 400, names, b) for b, names in bodies.items()]
    out.append(Bad("NDJSON not UTF-8", 400, "UTF-8", b'{"a": 1}\n{"b": "\xff"}', NDJSON))
    latin = {"Content-Type": "application/json; charset=latin-1"}
    out.append(Bad("a latin-1 charset", 400, "UTF-8", b'{"items": ["\xe9"]}', latin))
    out.append(Bad("no body at all", 400, "not valid JSON", None))
    return out


def oversized() -> list[Bad]:
    padding = b" " * (MAX_BODY_BYTES + 1 - len(VALID))
    many = items_json(*(["1"] * (MAX_ITEMS + 1)))
    lines = b"\n".join([b"1"] * (MAX_ITEMS + 1))
    return [
        Bad("a body one byte over", 413, "MAX_BODY_BYTES", VALID + padding),
        Bad("an NDJSON body over", 413, "MAX_BODY_BYTES", b"1\n" * (MAX_BODY_BYTES // 2 + 1), NDJSON),
        Bad("a 6 MB body", 413, "MAX_BODY_BYTES", items_json(json.dumps("a" * 6_000_000))),
        Bad("one item too many", 413, "MAX_ITEMS", many),
        Bad("one NDJSON line too many", 413, "MAX_ITEMS", lines, NDJSON),
    ]


def odd_batch_ids() -> list[Bad]:
    ids = [
        "..", ".", "...", "%2e%2e", "..%5c..%5cwindows", "%252e%252e%252f", "%00", "%0a", "%0d%0aSet-Cookie:x=y",
        quote("' OR 1=1 --"), quote("<script>alert(1)<\\script>"), quote("${jndi:ldap:x}"), quote("{{7*7}}"),
        "a" * 4000, "ABCDEF0123456789ABCDEF0123456789", "0" * 31, "0" * 33, "g" * 32, "%ff", "%c0%af",
        quote("\U0001f4a3"), "%20", "null", "undefined", "-1", "1e10", "batches", "~root", "$metadata", "*", "%2A",
        "a;b", "a,b", "manifest.json", "0" * 32 + "%00", "0" * 32 + "%0a", "0" * 32 + ".json", quote("\u0660" * 32),
        "%", "%%32%65",
    ]  # fmt: skip
    out = [Bad(f"batch id {i[:24]!r}", 404, "32 lowercase hex", None, {}, "GET", f"{BATCHES}/{i}") for i in ids]
    out.append(Bad("an unknown well-formed id", 404, "no batch", None, {}, "GET", f"{BATCHES}/{'0' * 32}"))
    out.append(Bad("a real id's neighbour", 404, "no batch", None, {}, "GET", f"{BATCHES}/{'f' * 32}"))
    return out


def odd_start_times() -> list[Bad]:
    """`not_before` in shapes Python's ISO 8601 reader takes but RFC 3339 does not (issue 36 item 17), a day
    ahead, so that only their shape is wrong."""
    day = datetime.now(timezone.utc).date() + timedelta(days=1)
    year, week, weekday = day.isocalendar()
    times = [
        f"{year}-W{week:02d}-{weekday}T12:00:00Z",  # a week date
        f"{day.year}-{day.timetuple().tm_yday:03d}T12:00:00Z",  # an ordinal date
        f"{day:%Y%m%d}T120000Z",  # the basic format
        f"{day.isoformat()}T12:00:00Z\x00",  # a trailing NUL
        f"{day.isoformat()}T12:00:00Z ",  # a trailing space
        f"{day.isoformat()}T12:00:00",  # no offset
        f"{day.isoformat()}T12:00Z",  # no seconds
        day.isoformat(),  # a date alone
        f"{day.isoformat()} 12:00:00Z",  # a space for the T
        f"{day.isoformat()}T12:00:00+0000",  # an offset without its colon
        f"{day.isoformat()}T12:00:00Z".replace("1", "\u0661"),  # digits that are not ASCII
    ]
    return [
        Bad(f"not_before {t[:24]!r}", 400, "not_before", VALID, JSON, "POST", f"{BATCHES}?not_before={quote(t)}")
        for t in times
    ]


def front_end_refusals() -> list[Bad]:
    """What the host answers before any function runs (issue 36 item 17): JSON, as the app's own refusals are."""
    batch = f"{BATCHES}/{'0' * 32}"
    out = [
        Bad(f"{method} on cancel", 405, "POST", None, {}, method, f"{batch}/cancel")
        for method in ("GET", "PUT", "DELETE", "PATCH")
    ]
    out.append(Bad("PUT on the batch list", 405, "GET", VALID, JSON, "PUT", BATCHES))
    out.append(Bad("a query over 8 KB", 414, "8192", None, {}, "GET", f"{BATCHES}?limit=5&pad={'x' * 9000}"))
    out.append(Bad("a submit's query over 8 KB", 414, "8192", VALID, JSON, "POST", f"{BATCHES}?{'a=b&' * 2100}"))
    return out


def odd_poison_ids() -> list[Bad]:
    ids = ["..", "%00", "a" * 2000, quote("<x>"), "%ff", "0", quote("' OR 1=1"), "%20"]
    return [Bad(f"poison id {i[:16]!r}", 404, "no parked chunk", None, {}, "GET", f"/api/poison/{i}") for i in ids]


CATEGORIES = {
    "invalid JSON": invalid_json,
    "wrong shapes and types": wrong_shapes,
    "bad replay requests": bad_replays,
    "invalid NDJSON": invalid_ndjson,
    "deep nesting": deep_nesting,
    "huge strings": huge_strings,
    "gzip attacks": gzip_attacks,
    "wrong or missing content type": wrong_content_types,
    "empty and non-UTF-8 bodies": empty_and_not_utf8,
    "oversized bodies": oversized,
    "odd batch ids": odd_batch_ids,
    "odd poison ids": odd_poison_ids,
    "odd start times": odd_start_times,
    "refused by the host's front end": front_end_refusals,
}

# Paths that leave the route's one segment: the host matches no function and answers an empty 404, as the
# platform does; they never reach the app.
TRAVERSALS = [
    "../queues", "..%2fqueues", "%2e%2e%2fqueues", "a%2Fb", "..%2f..%2f..%2fetc%2fpasswd", "../../../etc/passwd",
    "..%5c..%5c/windows", "x/../../queues", "%2e%2e/%2e%2e/openapi.json", "a/b/c",
]  # fmt: skip
