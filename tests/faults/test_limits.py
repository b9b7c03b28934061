"""Handler limits across hosts: HANDLER_ITEMS_PER_S and HANDLER_MAX_IN_FLIGHT hold for two hosts together.

Two local hosts on one Azurite stand for two instances; the handler notes when each chunk starts and ends
(`tests.faults.handlers:timed`), and the test measures the app-wide rate and concurrency from those notes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.faults.audit import audit, items_for, paced
from tests.faults.conftest import StartStack

pytestmark = pytest.mark.faults

CHUNK_ITEMS = 10
RATE = 100.0  # items a second, for the whole app
IN_FLIGHT = 2


def chunk_times(handled: Path) -> list[tuple[float, float, int]]:
    """(start, end, items) of every chunk any host handled."""
    rows = []
    for path in handled.glob("*.times"):
        for line in path.read_text().splitlines():
            start, end, n = line.split()
            rows.append((float(start), float(end), int(n)))
    return sorted(rows)


def most_at_once(rows: list[tuple[float, float, int]]) -> int:
    edges = sorted([(s, 1) for s, _, _ in rows] + [(e, -1) for _, e, _ in rows])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def worst_window_rate(rows: list[tuple[float, float, int]], window_s: float) -> float:
    """The most items started within any `window_s` (from a chunk's start), per second."""
    starts = [(s, n) for s, _, n in rows]
    worst = 0
    for i, (begin, _) in enumerate(starts):
        worst = max(worst, sum(n for s, n in starts[i:] if s < begin + window_s))
    return worst / window_s


@pytest.mark.timeout(300)
def test_the_item_rate_and_chunks_in_flight_hold_for_two_hosts_together(start_stack: StartStack) -> None:
    stack = start_stack(
        {
            **paced(chunk_items=CHUNK_ITEMS, delay_s=0.15, concurrency=4, receive_batch=8),
            "HANDLER": "tests.faults.handlers:timed",
            "HANDLER_ITEMS_PER_S": str(RATE),
            "HANDLER_MAX_IN_FLIGHT": str(IN_FLIGHT),
            "AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls": "1",
            "MAX_DRAINERS_PER_QUEUE": "2",
            "SCALE_OUT_DEPTH": "10",
        },
        hosts=2,
    )
    items = items_for(stack.token, 1_500)
    started = time.monotonic()
    batch_id = stack.submit(items)["batch_id"]
    status = stack.wait_completed(batch_id, timeout_s=200)
    drained_s = time.monotonic() - started
    found = audit(stack, batch_id, items, CHUNK_ITEMS)
    rows = chunk_times(stack.handler_logs)

    assert status["items"]["succeeded"] == len(items)
    assert (found.lost, found.duplicated) == (0, 0), found
    assert stack.hosts_that_worked() == 2, f"both hosts drained a share: {stack.executions_by_process()}"
    assert most_at_once(rows) <= IN_FLIGHT, "HANDLER_MAX_IN_FLIGHT held across both hosts"
    # Over the whole drain the rate is the limit (the drainers' shares add up to it) ...
    overall = sum(n for _, _, n in rows) / (rows[-1][0] - rows[0][0])
    assert RATE * 0.6 <= overall <= RATE * 1.1, f"{overall:.1f} items/s for a limit of {RATE:g} ({drained_s:.1f} s)"
    # ... and no 5-second window ran past it by more than the REFRESH_S catch-up of a drainer that just started.
    assert worst_window_rate(rows, 5.0) <= RATE * 1.3
