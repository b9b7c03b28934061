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


IDLE_FRAMES = ("select",)  # the event loop waiting in its selector: no CPU spent
OWN = "shared/"  # the app's own functions: their inclusive time is shown


def cpu_entries(root: Frame, top: int = 12) -> dict[str, Any]:
    """Where a profile's busy time went (its samples outside the selector's wait): the busy seconds, and the top
    functions by self time, and the app's own functions (OWN) by inclusive time (each counted once per stack: its
    outermost frame), named `function (file)`. Sampled while on a core, busy time is the process's CPU time, give
    or take the time it waited for a core."""
    self_time: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    idle = 0.0

    def name(frame: Any) -> str:
        return f"{frame.function} ({frame.file_path_short})"

    def walk(frame: Any, open_names: frozenset[str]) -> float:
        """The busy seconds under `frame`, adding its own to the tables."""
        nonlocal idle
        if frame.function in IDLE_FRAMES:
            idle += frame.time
            return 0.0
        if getattr(frame, "is_synthetic", False):
            return 0.0  # pyinstrument's [self] and the like: counted in their parent's self time
        key = name(frame)
        self_time[key] = self_time.get(key, 0.0) + frame.total_self_time
        busy = frame.total_self_time + sum(walk(child, open_names | {key}) for child in frame.children)
        if key not in open_names and frame.file_path_short.startswith(OWN):
            inclusive[key] = inclusive.get(key, 0.0) + busy
        return busy

    busy = walk(root, frozenset())

    def ranked(table: dict[str, float]) -> list[list[Any]]:
        return [[k, round(v, 4)] for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:top]]

    return {
        "busy_s": round(busy, 4),
        "idle_s": round(idle, 4),
        "self": ranked(self_time),
        "inclusive": ranked(inclusive),
    }
