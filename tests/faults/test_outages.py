"""Outages: Azurite restarted mid-drain (same data folder), the Service Bus stand-in stopped during submits.

Storage going away must lose nothing and the drain must resume by itself; Service Bus going away must
still accept batches (`"trigger": "deferred"`), the fallback must complete them, and push must work
again once the broker is back.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.audit import audit, drain_lines, first_line_with, items_for, merged
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import Stack, call, wait_until
from tests.faults.test_crashes import SLOW_DRAIN, total

pytestmark = pytest.mark.faults

# Longer than the storage client's own retries (backoffs of about 2.5, 4.5 and 8.5 s: 16 s in all), so the
# drain itself must notice the outage, hand over and come back by itself, while chunks are in flight.
STORAGE_OUTAGE_S = 25


@pytest.mark.timeout(240)
def test_restarting_azurite_mid_drain_loses_nothing_and_the_drain_resumes_by_itself(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack(SLOW_DRAIN)
    items = items_for(stack.token, 20_000)
    batch_id = stack.submit(items)["batch_id"]
    wait_until(lambda: total(stack) > 0, 60, "the drain to start")
    time.sleep(1.5)
    stack.stop_azurite()
    time.sleep(STORAGE_OUTAGE_S)
    stack.start_azurite()
    back_at = time.monotonic()
    seen = total(stack)
    wait_until(lambda: total(stack) > seen, 90, "the drain to resume after the restart")
    resumed_s = time.monotonic() - back_at
    status = stack.wait_completed(batch_id, timeout_s=150)
    found = audit(stack, batch_id, items, int(SLOW_DRAIN["CHUNK_MAX_ITEMS"]))

    assert status["status"] == "completed", status
    assert status["items"]["succeeded"] == len(items)
    assert (found.lost, found.duplicated) == (0, 0), found
    assert stack.hosts[0].process.running(), "the host lived through the outage"
    logs = stack.host_logs()
    cut_off = [d for d in drain_lines(logs) if d.outcome in ("storage-failed", "lease-lost")]
    assert cut_off or "stopped by storage" in logs, "the outage outlasted the storage client's retries"
    assert "Task exception was never retrieved" not in logs
    reliability.record(
        "2. Azurite restarted mid-drain (same data folder)",
        found,
        tries=1,
        recover_s=f"{resumed_s:.1f} s after Azurite was back",
        proves=(
            f"a {STORAGE_OUTAGE_S} s outage, longer than the storage client's retries, cuts the drain off; it hands "
            "over with a `continue` event and the chunks in flight reappear"
        ),
    )


def fallback_interval_ms(stack: Stack) -> int:
    reply = call(f"{stack.live_host().url}/api/queues")
    [queue] = [q for q in reply.json()["partitions"] if q["queue"] == stack.work_queue]
    return int(queue["fallback_backoff"]["interval_ms"])


@pytest.mark.timeout(420)
def test_with_service_bus_down_batches_are_deferred_the_fallback_completes_them_and_push_returns(
    start_stack: StartStack, reliability: Recorder
) -> None:
    # The app's own back-off (floor 1 minute, ceiling 30 minutes), not a shortened one. The timer ticks every
    # second here instead of every minute, to keep the run short: "within two ticks" is what is measured.
    stack = start_stack({"FALLBACK_SCHEDULE": "*/1 * * * * *", "CHUNK_MAX_ITEMS": "100"})
    before = items_for(f"{stack.token}-before", 2_000)
    first = stack.submit(before)
    assert first["trigger"] == "published", first
    batches = [(first["batch_id"], before)]
    # The push drain keeps going while the queue holds work: it must be over, lease released, before the broker
    # goes, or it drains the deferred batches itself and the fallback is never tested.
    stack.wait_completed(first["batch_id"], timeout_s=60)
    wait_until(lambda: stack.leased_slots() == 0, 60, "the push drain to end and release its lease")
    # Push keeps the queue empty whenever the fallback looks: its back-off grows past the floor.
    wait_until(lambda: fallback_interval_ms(stack) >= 120_000, 150, "the fallback to back off after an idle look")
    backed_off_ms = fallback_interval_ms(stack)
    stack.stop_broker()
    down_at = time.monotonic()
    for n in range(3):
        items = items_for(f"{stack.token}-{n}", 2_000)
        accepted = stack.submit(items)
        assert accepted["trigger"] == "deferred", accepted
        batches.append((accepted["batch_id"], items))
    for batch_id, _ in batches[1:]:
        # Within two ticks of the deferral, not at the end of the back-off (two minutes at least, here).
        assert stack.wait_completed(batch_id, timeout_s=30)["trigger"] == "deferred"
    deferred = len(batches) - 1
    fallback_s = time.monotonic() - down_at
    assert fallback_s * 1000 < backed_off_ms / 2
    assert first_line_with(stack.host_logs(), ["Service Bus unreachable", "here"]), "the fallback drained itself"

    pushed_before = stack.starts("drain")
    stack.start_broker()
    restarted_at = time.monotonic()
    tries = iter(range(1000))

    def submit_until_published() -> dict[str, object] | None:
        items = items_for(f"{stack.token}-push{next(tries)}", 2_000)
        accepted = stack.submit(items)
        batches.append((accepted["batch_id"], items))  # a try still deferred is a batch too: it must complete
        return accepted if accepted["trigger"] == "published" else None

    accepted = wait_until(submit_until_published, 60, "a submit to publish its trigger again", every_s=1.0)
    push_back_s = time.monotonic() - restarted_at
    stack.wait_completed(str(accepted["batch_id"]), timeout_s=60)
    # The host's Service Bus trigger receives again (a drain already running here makes the event's own drain
    # return at once, unlogged, so the invocations started are counted, not the drain reports).
    wait_until(lambda: stack.starts("drain") > pushed_before, 60, "the host to be triggered by Service Bus again")

    for batch_id, _ in batches:
        stack.wait_completed(batch_id, timeout_s=60)
    found = merged(audit(stack, batch_id, items, 100) for batch_id, items in batches)
    assert (found.lost, found.duplicated) == (0, 0), found
    reliability.record(
        "3. Service Bus stand-in stopped during submits, then restarted",
        found,
        tries=deferred,
        recover_s=(
            f"{fallback_s:.0f} s for the fallback to complete {deferred} deferred batches (its back-off was at "
            f"{backed_off_ms / 1000:.0f} s; default ceiling 30 min); push back {push_back_s:.0f} s after the restart"
        ),
        proves=(
            'submits answer 202 `"deferred"`; a deferral brings the fallback to the queue at its next tick, '
            "whatever its back-off (it drains without Service Bus); push resumes"
        ),
    )
