"""Where a profiled drain's time goes, by part of the per-message work (pure, over a pyinstrument call tree)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# pyinstrument frame function names -> the part of the work they are (the outermost match counts)
PARTS: dict[str, str] = {
    "decode": "decode the chunk message (JSON of its items; base64 and gunzip first if compressed)",
    "_read_manifest": "read the batch manifest (once per batch)",
    "settle": "settle the outcomes",
    "_put": "write the result blobs (group commit: JSON encode, one PutBlob for many chunks)",
    "_delete": "delete the message (DeleteMessage through the SDK)",
    "_receive": "receive (GetMessages of 32 through the SDK)",
    "_run_handler": "the handler (no-op)",
}
OTHER = "everything else: the event loop waiting on Azurite, tasks, set-up and tear-down, Service Bus"


class Frame(Protocol):
    @property
    def function(self) -> str: ...
    @property
    def time(self) -> float: ...
    @property
    def children(self) -> Sequence[Any]: ...


def parts(root: Frame) -> dict[str, float]:
    """Seconds per part, outermost match only (a part's own callees are inside it), plus the rest."""
    totals: dict[str, float] = {}

    def walk(frame: Frame) -> None:
        part = PARTS.get(frame.function)
        if part is not None:
            totals[part] = totals.get(part, 0.0) + frame.time
            return
        for child in frame.children:
            walk(child)

    walk(root)
    totals[OTHER] = max(0.0, root.time - sum(totals.values()))
    return {k: round(v, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}
