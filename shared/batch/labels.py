"""A batch's metadata: a small map of labels the caller gives at submit, returned by its status and the batch list.

At most MAX_PAIRS pairs (the OpenAI Batch API's 16); a key is 1-64 characters of letters, digits and `_ . : -`; a
value a string of at most MAX_VALUE_CHARS characters; the whole, as compact JSON, at most MAX_BYTES bytes of UTF-8
(it rides in the batch index's blob metadata, base64url, beside the counts: Azure allows 8 KiB there). Given as
the `X-Metadata` header or the `metadata` query parameter, a JSON object; anything else is a JSON 400 naming
`metadata`. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping

from shared.core.errors import LimitExceeded, MalformedRequest

MAX_PAIRS = 16
MAX_VALUE_CHARS = 256
MAX_BYTES = 4096
KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}", re.ASCII)


def given(headers: Mapping[str, str], params: Mapping[str, str]) -> dict[str, str] | None:
    """The metadata a submit gave (`X-Metadata` wins over `?metadata=`), checked; None if it gave none."""
    text = headers.get("x-metadata", params.get("metadata"))
    return None if text is None else checked(text)


def checked(text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except ValueError:
        raise MalformedRequest("metadata must be a JSON object of strings", field="metadata") from None
    if not isinstance(doc, dict):
        raise MalformedRequest("metadata must be a JSON object of strings", field="metadata")
    if len(doc) > MAX_PAIRS:
        raise LimitExceeded(
            f"metadata holds at most {MAX_PAIRS} pairs", limit="metadata pairs", maximum=MAX_PAIRS, status=400
        )
    for key, value in doc.items():
        if not KEY.fullmatch(key):
            raise MalformedRequest(
                f"a metadata key is 1-64 characters of letters, digits and _ . : - (got {key[:64]!r})", field="metadata"
            )
        if not isinstance(value, str):
            raise MalformedRequest(f"metadata {key!r}: values are strings", field="metadata")
        if len(value) > MAX_VALUE_CHARS:
            raise LimitExceeded(
                f"metadata {key!r}: a value holds at most {MAX_VALUE_CHARS} characters",
                limit="metadata value", maximum=MAX_VALUE_CHARS, status=400,
            )  # fmt: skip
    try:
        size = len(compact(doc))
    except UnicodeEncodeError:  # a lone surrogate (JSON's \ud800): no UTF-8 text
        raise MalformedRequest("metadata must be valid Unicode text", field="metadata") from None
    if size > MAX_BYTES:
        raise LimitExceeded(
            f"metadata is at most {MAX_BYTES} bytes as JSON", limit="metadata size", maximum=MAX_BYTES, status=400
        )
    return doc


def compact(labels: Mapping[str, str]) -> bytes:
    return json.dumps(labels, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def encoded(labels: Mapping[str, str]) -> str:
    """The labels as a blob metadata value (ASCII): base64url of their compact JSON."""
    return base64.urlsafe_b64encode(compact(labels)).decode("ascii")


def decoded(text: str | None) -> dict[str, str] | None:
    """The labels an index entry carries; None if it carries none, or none that read back."""
    if text is None:
        return None
    try:
        doc = json.loads(base64.urlsafe_b64decode(text.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        return None
    return doc if isinstance(doc, dict) else None
