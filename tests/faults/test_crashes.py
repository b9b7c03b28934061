"""Crashes: `kill -9` of the host mid-drain, again and again, and a drainer killed holding its lease.

Nothing may be lost and no result counted twice; the handler's re-executions (work redone after a
crash) are counted and reported, and the watchdog, not the fallback, resumes a crashed drainer.
"""

from __future__ import annotations

import random
import statistics
import time

import pytest

from tests.faults.audit import audit, drain_lines, items_for, paced
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import Stack, wait_until

pytestmark = pytest.mark.faults

KILLS = 5
BIG_BATCH = 50_000
CHUNK_ITEMS = 500
# Slow, narrow draining (0.3 s per chunk, two at a time): the 100 chunks take about 15 s of work, so
# five kills each after 0.3-2 s of progress all land mid-drain.
SLOW_DRAIN = paced(chunk_items=CHUNK_ITEMS, delay_s=0.3)


def total(stack: Stack) -> int:
    return sum(stack.executions_by_process().values())


@pytest.mark.timeout(420)
def test_kill_9_at_random_points_while_draining_50000_items_loses_nothing_and_counts_nothing_twice(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack(SLOW_DRAIN)
    rng = random.Random(20240601)
    items = items_for(stack.token, BIG_BATCH)
    batch_id = stack.submit(items)["batch_id"]
    recoveries: list[float] = []
    restarted_at: float | None = None
    for kill in range(KILLS):
        seen = total(stack)
        wait_until(lambda seen=seen: total(stack) > seen, 120, f"the drain to make progress before kill {kill + 1}")
        if restarted_at is not None:
            recoveries.append(time.monotonic() - restarted_at)
        time.sleep(rng.uniform(0.3, 2.0))
        status = stack.status(batch_id)
        assert status is not None
        assert status["status"] != "completed", f"the batch finished before kill {kill + 1}: slow the drain down"
        stack.kill_host()
        stack.restart_host()
        restarted_at = time.monotonic()

    status = stack.wait_completed(batch_id, timeout_s=180)
    recoveries.append(time.monotonic() - restarted_at)  # the last restart: until completion
    found = audit(stack, batch_id, items, CHUNK_ITEMS)

    assert status["status"] == "completed", status
    assert status["items"] == {"total": BIG_BATCH, "succeeded": BIG_BATCH, "failed": 0, "pending": 0}
    assert (found.lost, found.duplicated) == (0, 0), found
    assert found.succeeded == BIG_BATCH
    reliability.record(
        "1. `kill -9` of the host mid-drain, restarted each time",
        found,
        tries=KILLS,
        recover_s=f"median {statistics.median(recoveries[:-1]):.0f} s to resume, max {max(recoveries[:-1]):.0f} s",
        proves="chunks in flight at a crash reappear and are redone; results overwrite their own blob",
    )


def watchdog_items(logs: str) -> int:
    """Items done by drains that a watchdog event started (from the drain's one-line session report)."""
    return sum(d.items_ok for d in drain_lines(logs) if d.reason == "watchdog")


@pytest.mark.timeout(240)
def test_a_drainer_killed_holding_its_lease_resumes_through_the_watchdog_within_about_a_lease_period(
    start_stack: StartStack, reliability: Recorder
) -> None:
    lease_s = 15
    ceiling_s = 600
    bound_s = 4 * lease_s
    # The fallback would find the work only at its 10-minute interval, and the lost trigger event comes back
    # only when its lock (2 minutes) runs out: within the bound, only the watchdog can resume the queue.
    stack = start_stack(
        {
            **SLOW_DRAIN,
            "LEASE_S": str(lease_s),
            "BACKOFF_FLOOR_MS": str(ceiling_s * 1000),
            "BACKOFF_CEILING_MS": str(ceiling_s * 1000),
        },
        lock_s=120,
    )
    items = items_for(stack.token, 20_000)
    batch_id = stack.submit(items)["batch_id"]
    wait_until(lambda: total(stack) > 0, 60, "the drain to start")
    time.sleep(1.0)
    assert stack.leased_slots() == 1, "the drainer holds its lease when it is killed"
    stack.kill_host()
    killed_at = time.monotonic()
    stack.restart_host()
    seen = total(stack)
    wait_until(lambda: total(stack) > seen, bound_s, f"the backlog to resume within {bound_s} s of the kill")
    recovered_s = time.monotonic() - killed_at
    status = stack.wait_completed(batch_id, timeout_s=120)
    found = audit(stack, batch_id, items, CHUNK_ITEMS)

    # The session that finished the batch writes its one-line report when it ends, which can be a moment after the
    # status reads completed (it settles its last deletes and looks once more at the queue): wait for that line.
    try:
        wait_until(lambda: watchdog_items(stack.host_logs()) > 0, 60, "a watchdog-started drain's report", every_s=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; the drains: {drain_lines(stack.host_logs())}") from None
    assert recovered_s < bound_s < 120 < ceiling_s
    assert status["status"] == "completed"
    assert (found.lost, found.duplicated) == (0, 0), found
    reliability.record(
        "7. drainer killed holding its lease",
        found,
        tries=1,
        recover_s=f"{recovered_s:.0f} s (lease {lease_s} s; fallback ceiling {ceiling_s} s)",
        proves="the watchdog scheduled at start resumes a dead drainer's backlog about a lease period later",
    )
