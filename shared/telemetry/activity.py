"""What this process's drainers settled since it started: the item side of the cost comparison on the
operator's page (`shared.ops.costs`), counted as each result record is written (where the drain session's report
counts them), so it keeps pace with the transactions counted meanwhile."""

from __future__ import annotations

import threading


class Activity:
    """Items settled (succeeded or parked as failed) by the drain sessions of this process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ok = 0
        self._failed = 0

    def settled(self, ok: int, failed: int) -> None:
        with self._lock:
            self._ok += ok
            self._failed += failed

    def view(self) -> dict[str, int]:
        with self._lock:
            return {"succeeded": self._ok, "failed": self._failed, "total": self._ok + self._failed}


ACTIVITY = Activity()
