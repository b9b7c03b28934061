"""When each queue next needs the broker's attention (a lock to expire, a schedule to fire, a TTL to end).

One heap over all queues, so the broker sleeps until the earliest moment anything is due instead of polling.
Entries are never removed early: a superseded one is recognised and skipped when it comes up.
"""

from __future__ import annotations

import heapq

from emulators.servicebus.entities import Queue


class Wakeups:
    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []
        self._due: dict[str, int] = {}
        self._queues: dict[str, Queue] = {}

    def note(self, queue: Queue) -> None:
        """Record the queue's next deadline if it is earlier than the one already recorded for it."""
        due = queue.next_deadline_ms()
        if due is None:
            return
        current = self._due.get(queue.name)
        if current is None or due < current:
            self._due[queue.name] = due
            self._queues[queue.name] = queue
            heapq.heappush(self._heap, (due, queue.name))

    def pop_due(self, now_ms: int) -> list[Queue]:
        """The queues with something due by `now_ms`, each once; they must be noted again after handling."""
        due_queues: list[Queue] = []
        while self._heap and self._heap[0][0] <= now_ms:
            due, name = heapq.heappop(self._heap)
            if self._due.get(name) != due:
                continue  # superseded by an earlier deadline for the same queue
            del self._due[name]
            due_queues.append(self._queues[name])
        return due_queues

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None
