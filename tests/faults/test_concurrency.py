"""Concurrency: four hosts draining one queue at once, and a storm of 1,000 trigger events for one queue.

Leases bound how many drainers work a queue; every other trigger returns at once. However many
drainers there are, nothing is lost, no result is counted twice, and no item is handled twice.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.audit import LeaseWatch, audit, drain_lines, items_for, paced
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import wait_until

pytestmark = pytest.mark.faults

CHUNK_ITEMS = 100
HOSTS = 4


@pytest.mark.timeout(300)
def test_four_hosts_draining_one_queue_at_once_lose_nothing_and_count_nothing_twice(
    start_stack: StartStack, reliability: Recorder
) -> None:
    # One drain at a time per host (maxConcurrentCalls 1), so the drainers recruited for slots 1-3 of the
    # deep queue land on the hosts that are not busy yet; each chunk takes 0.4 s, two at a time per drainer.
    stack = start_stack(
        {
            **paced(chunk_items=CHUNK_ITEMS, delay_s=0.4, receive_batch=2),
            "AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls": "1",
            "MAX_DRAINERS_PER_QUEUE": str(HOSTS),
            "SCALE_OUT_DEPTH": "10",
        },
        hosts=HOSTS,
    )
    items = items_for(stack.token, 20_000)
    with LeaseWatch(stack) as leases:
        started = time.monotonic()
        batch_id = stack.submit(items)["batch_id"]
        status = stack.wait_completed(batch_id, timeout_s=240)
        drained_s = time.monotonic() - started
    found = audit(stack, batch_id, items, CHUNK_ITEMS)
    hosts_worked = stack.hosts_that_worked()

    assert status["items"] == {"total": len(items), "succeeded": len(items), "failed": 0, "pending": 0}
    assert (found.lost, found.duplicated) == (0, 0), found
    assert found.succeeded == len(items)
    assert hosts_worked == HOSTS, f"every host drained a share: {stack.executions_by_process()}"
    assert 2 <= leases.most <= HOSTS, f"between 2 and {HOSTS} drain leases held at once, saw {leases.most}"
    reliability.record(
        f"5. {HOSTS} hosts draining one queue at once",
        found,
        tries=1,
        recover_s=f"{drained_s:.0f} s to drain; {hosts_worked} hosts did work, up to {leases.most} drainers at once",
        proves="drain leases split a queue between hosts; a message is handled by one drainer at a time",
    )


STORM = 1_000
MAX_DRAINERS = 2


@pytest.mark.timeout(300)
def test_a_storm_of_1000_trigger_events_runs_a_bounded_number_of_drains_without_errors_or_extra_work(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack(
        {
            # Full pages of 4 on a queue 20 deep recruit the second drainer: the bound is reached, never passed.
            **paced(chunk_items=CHUNK_ITEMS * 5, delay_s=0.5),
            "MAX_DRAINERS_PER_QUEUE": str(MAX_DRAINERS),
            "SCALE_OUT_DEPTH": "5",
            "VISIBILITY_TIMEOUT_S": "30",
        },
        hosts=2,
    )
    items = items_for(stack.token, 10_000)
    with LeaseWatch(stack) as leases:
        started = time.monotonic()
        accepted = stack.submit(items)
        stack.ring(STORM)
        wait_until(
            lambda: stack.invocations("drain") + stack.invocations("drain", "Failed") >= STORM + 1,
            240,
            f"the {STORM} storm events and the submit's own to be served",
            every_s=1.0,
        )
        served_s = time.monotonic() - started
        batch_id = accepted["batch_id"]
        status = stack.wait_completed(batch_id, timeout_s=120)
    found = audit(stack, batch_id, items, CHUNK_ITEMS * 5)
    logs = stack.host_logs()
    drains = drain_lines(logs)
    working = [d for d in drains if d.messages > 0]

    assert accepted["trigger"] == "published", "the submit's own event went out while the fallback ran too"
    assert status["items"]["succeeded"] == len(items), status
    assert (found.lost, found.duplicated) == (0, 0), found
    assert stack.invocations("drain", "Failed") == 0, stack.tails()
    assert "Exception while executing" not in logs
    assert "Traceback" not in logs
    assert stack.dead_lettered_events() == 0
    assert found.reexecutions == 0, "no item was handled twice: the storm added no work"
    assert found.executions == len(items)
    assert leases.most <= MAX_DRAINERS, f"at most {MAX_DRAINERS} drain leases at once, saw {leases.most}"
    reliability.record(
        f"6. trigger storm: {STORM:,} trigger events for one queue",
        found,
        tries=STORM,
        recover_s=(
            f"{served_s:.0f} s to serve the storm; {len(working)} drain(s) did work, "
            f"at most {leases.most} at once (bound {MAX_DRAINERS})"
        ),
        proves="a trigger is only a doorbell: extra events find the lease taken or the queue empty and cost no work",
    )
