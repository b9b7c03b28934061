"""The app's metrics, through the OpenTelemetry metrics API (a no-op until `shared.telemetry.export` configures an SDK).

Counters are added to where the work happens (a settled chunk, a finished drain session); what is already
counted elsewhere is read when the exporter collects: storage transactions from the process's metering counter,
queue and poison depths and the fallback's back-off from the last values seen (`observe_*`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from shared.telemetry.metering import TransactionCounter

METER = metrics.get_meter("queue_drain")

ITEMS = METER.create_counter(
    "queue_drain.items", unit="{item}", description="Items handled, by outcome: succeeded, retried, parked"
)
CHUNKS = METER.create_counter(
    "queue_drain.chunks", unit="{chunk}", description="Chunk messages handled, by outcome: complete, retrying"
)
SESSIONS = METER.create_counter(
    "queue_drain.drain.sessions", unit="{session}", description="Drain sessions, by outcome (DrainReport.outcome)"
)
WAKE_LATENCY = METER.create_histogram(
    "queue_drain.wake_latency",
    unit="ms",
    description="From a batch's acceptance to the first chunk of it handled",
)

_lock = threading.Lock()
_depths: dict[tuple[str, str], int] = {}  # (queue, "work" | "poison") -> approximate messages
_backoff_s: dict[str, float] = {}  # queue -> the fallback's current interval


def observe_depth(queue: str, depth: int, *, kind: str = "work") -> None:
    with _lock:
        _depths[(queue, kind)] = depth


def observe_backoff(queue: str, interval_s: float) -> None:
    with _lock:
        _backoff_s[queue] = interval_s


def item_outcomes(succeeded: int, retried: int, parked: int, attributes: dict[str, Any]) -> None:
    for outcome, count in (("succeeded", succeeded), ("retried", retried), ("parked", parked)):
        if count:
            ITEMS.add(count, {**attributes, "outcome": outcome})


def _depth_observations(options: CallbackOptions) -> Iterable[Observation]:
    with _lock:
        seen = dict(_depths)
    return [Observation(n, {"queue": q, "kind": kind}) for (q, kind), n in seen.items()]


def _backoff_observations(options: CallbackOptions) -> Iterable[Observation]:
    with _lock:
        seen = dict(_backoff_s)
    return [Observation(s, {"queue": q}) for q, s in seen.items()]


def register_observers(counter: TransactionCounter) -> None:
    """The observable instruments; once per process (`shared.telemetry.export.configure`)."""

    def transactions(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"operation": op}) for op, n in counter.totals().items()]

    METER.create_observable_counter(
        "queue_drain.storage.transactions",
        [transactions],
        unit="{transaction}",
        description="Storage transactions since start, by operation",
    )
    METER.create_observable_gauge(
        "queue_drain.queue.depth", [_depth_observations], unit="{message}", description="Approximate messages"
    )
    METER.create_observable_gauge(
        "queue_drain.fallback.interval", [_backoff_observations], unit="s", description="The fallback's back-off"
    )
