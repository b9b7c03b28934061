"""Poison messages: a chunk's failed items with the reason, parked in `<queue>-poison` for inspection
and replay (pure encoding; I/O lives with the drain engine and the operator tools).

Wire form: {"v":1,"poison":{"queue","reason","failed","attempt","at"},"chunk":<chunk envelope>}
or, for a message that was not a chunk envelope at all, "raw": "<its text>" instead of "chunk".
The chunk envelope is the one to re-enqueue on replay: its generation already follows the parent's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.core.errors import MalformedEnvelope

MAX_REASON_CHARS = 500
# Room kept for the poison fields around an embedded chunk envelope.
POISON_OVERHEAD_BYTES = 2048


@dataclass(frozen=True)
class PoisonInfo:
    queue: str
    reason: str
    failed: int
    attempt: int
    at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "reason": self.reason[:MAX_REASON_CHARS],
            "failed": self.failed,
            "attempt": self.attempt,
            "at": self.at,
        }


def encode(info: PoisonInfo, chunk_text: str) -> str:
    return '{"v":1,"poison":' + json.dumps(info.to_json(), separators=(",", ":")) + ',"chunk":' + chunk_text + "}"


def encode_raw(info: PoisonInfo, raw: str) -> str:
    return json.dumps({"v": 1, "poison": info.to_json(), "raw": raw}, separators=(",", ":"))


@dataclass(frozen=True)
class PoisonMessage:
    info: PoisonInfo
    chunk_text: str | None  # the chunk envelope to replay, or None for a raw (undecodable) message
    raw: str | None


def decode(text: str) -> PoisonMessage:
    try:
        doc = json.loads(text)
        meta = doc["poison"]
        info = PoisonInfo(
            str(meta["queue"]), str(meta["reason"]), int(meta["failed"]), int(meta["attempt"]), str(meta["at"])
        )
    except (ValueError, KeyError, TypeError) as e:
        raise MalformedEnvelope(f"not a poison message: {e}") from None
    chunk = doc.get("chunk")
    chunk_text = json.dumps(chunk, separators=(",", ":")) if isinstance(chunk, dict) else None
    return PoisonMessage(info, chunk_text, doc.get("raw") if isinstance(doc.get("raw"), str) else None)
