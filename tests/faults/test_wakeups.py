"""No wake-up lost, no count doubled (issue 18): faults at the points the code review named, whole stack.

Scenario 8 keeps the fallback ten minutes away, so only the app's own wake-ups (retry-due, continue,
watchdog) can finish the batch in time: storage stops under a running drainer (extensions, result writes,
lease renewal and release fail: messages and a lease left behind), then Service Bus stops for a moment
(watchdog reschedules fail: the old watchdog must stay), then the host is killed.

Scenario 9 parks chunks, duplicates some parked copies (as a repeated send after a crash would), fixes the
cause and replays the batch from several operators at once: every item must be counted once.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.core import layout
from shared.store import poison_index
from tests.faults.audit import audit, items_for
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import call, wait_until
from tests.faults.test_crashes import SLOW_DRAIN, total

pytestmark = pytest.mark.faults

FALLBACK_S = 600
STORAGE_OUTAGE_S = 20
BROKER_OUTAGE_S = 4


@pytest.mark.timeout(360)
def test_storage_and_broker_failing_under_a_drainer_then_a_kill_lose_no_wake_up(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack(
        {
            **SLOW_DRAIN,
            "LEASE_S": "15",
            "BACKOFF_FLOOR_MS": str(FALLBACK_S * 1000),
            "BACKOFF_CEILING_MS": str(FALLBACK_S * 1000),
            "RETRY_BASE_DELAY_MS": "1000",
            "RETRY_MAX_DELAY_MS": "3000",
        },
        lock_s=120,
    )
    chunk_items = int(SLOW_DRAIN["CHUNK_MAX_ITEMS"])
    items = items_for(stack.token, 20_000, fail="transient")
    started = time.monotonic()
    batch_id = stack.submit(items)["batch_id"]
    wait_until(lambda: total(stack) > 0, 60, "the drain to start")
    time.sleep(1.5)
    stack.stop_azurite()  # extensions, result writes, renewals and the release fail under the drainer
    time.sleep(STORAGE_OUTAGE_S)
    stack.start_azurite()
    seen = total(stack)
    wait_until(lambda: total(stack) > seen, 90, "the drain to resume after storage came back")
    stack.stop_broker()  # watchdog reschedules and wake-ups fail for a moment
    time.sleep(BROKER_OUTAGE_S)
    stack.start_broker()
    time.sleep(2)
    stack.kill_host()  # only what was scheduled before now can resume the queue
    killed_at = time.monotonic()
    stack.restart_host()
    seen = total(stack)
    wait_until(lambda: total(stack) > seen, 100, "the queue to resume after the kill")
    resumed_s = time.monotonic() - killed_at
    status = stack.wait_completed(batch_id, timeout_s=240)
    done_s = time.monotonic() - started
    found = audit(stack, batch_id, items, chunk_items)

    assert status["status"] == "completed", status
    assert status["items"]["succeeded"] == len(items)
    assert (found.lost, found.duplicated) == (0, 0), found
    assert done_s < FALLBACK_S, "finished by the app's own wake-ups, before the fallback's first look"
    assert resumed_s < 100, "resumed by a wake-up, before the killed drain's trigger event could come back (120 s)"
    reliability.record(
        "8. storage and Service Bus failing under a drainer, then `kill -9`, fallback 10 minutes away",
        found,
        tries=3,
        recover_s=f"{resumed_s:.0f} s after the kill; batch done {done_s:.0f} s after submit (fallback {FALLBACK_S} s)",
        proves=(
            f"a {STORAGE_OUTAGE_S} s storage outage under a drainer (messages and its lease left behind), a "
            f"{BROKER_OUTAGE_S} s Service Bus outage (watchdog reschedules refused) and a kill: no wake-up lost, "
            "every item settled once, with every item failing once on the way (retry-due wake-ups)"
        ),
    )


@pytest.mark.timeout(300)
def test_concurrent_replays_with_duplicate_parked_copies_count_every_item_once(
    start_stack: StartStack, reliability: Recorder
) -> None:
    chunk_items = 100
    stack = start_stack({"CHUNK_MAX_ITEMS": str(chunk_items), "FALLBACK_SCHEDULE": "*/2 * * * * *"})
    items = [{"id": f"{stack.token}-{n}", **({"fail": "until-fixed"} if n % 50 == 7 else {})} for n in range(3_000)]
    parked_items = sum(1 for i in items if i.get("fail"))
    items.append({"id": f"{stack.token}-held", "fail": "held"})  # its own chunk, in the handler until released
    batch_id = stack.submit(items)["batch_id"]

    def all_parked() -> dict[str, object] | None:
        now = stack.status(batch_id)
        return now if now and now["items"]["failed"] == parked_items else None

    status = wait_until(all_parked, 120, "every failing item parked")
    assert status["status"] == "processing", "the held chunk keeps the batch from being final"

    poison = stack.queue(f"{stack.work_queue}-poison")
    parked = poison.peek_messages(max_messages=32)
    duplicates = parked[: len(parked) // 2]
    state = stack.blobs().get_container_client(stack.state_container)
    for message in duplicates:  # the same parked chunk twice, as a drainer redoing it after a crash leaves it
        copy = poison.send_message(message.content)
        entry = poison_index.Entry(poison.queue_name, copy.id, copy.pop_receipt, None, batch_id, message.content)
        state.upload_blob(
            layout.poison_index_blob(poison.queue_name, copy.id),
            json.dumps(entry.to_json()),
            metadata={"batch_id": batch_id},
        )
    (stack.handler_logs / "fixed").write_text("the cause is fixed\n")
    body = json.dumps({"batch_id": batch_id}).encode()
    url = f"{stack.live_host().url}/api/poison/replay"
    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(pool.map(lambda _: call(url, "POST", body, {"Content-Type": "application/json"}), range(4)))
    assert all(r.status == 200 for r in replies), [(r.status, r.body[:200]) for r in replies]
    replayed = sum(r.json()["replayed"] for r in replies)
    (stack.handler_logs / "released").write_text("the held chunk may finish\n")

    def settled() -> dict[str, object] | None:
        now = stack.status(batch_id)
        return now if now and now["items"]["succeeded"] == len(items) else None

    final = wait_until(settled, 120, "every parked item to succeed after the replay")
    found = audit(stack, batch_id, items, chunk_items)

    assert replayed == len(parked), "each parked chunk replayed once, its duplicate copy skipped"
    assert final["items"] == {"total": len(items), "succeeded": len(items), "failed": 0, "pending": 0}
    assert (found.lost, found.duplicated) == (0, 0), found
    reliability.record(
        "9. replay races: concurrent replays of a batch with duplicate parked copies",
        found,
        tries=len(replies) + len(duplicates),
        recover_s=f"{len(parked)} parked chunks replayed once each",
        proves=(
            f"4 operators replaying one batch at once, with {len(duplicates)} parked chunks present twice: each "
            "chunk replayed once, the copies skipped (their items are no longer failed), no item counted twice"
        ),
    )
