"""An outcome once recorded never changes, on the real Azurite: it is not replaced by a discard (issue 36 item 2),
nor by a second handler call (issue 37, lifecycle seed 27).

A drainer handles a chunk, records it, and dies before deleting its message (or its delete's answer is lost).
The message comes back after its visibility timeout; by then its batch was cancelled, or has expired, so the
drainer that receives it discards it unrun, under a newer attempt. The items the handler really handled keep
their outcome and their values; only the items no record settled are discarded. When its batch goes on, the
drainer that receives it calls no handler on the items the record settled: a failure parked stays failed (the
batch's final status, its notice already sent, stays), a value stays the value exported; the items the record
left retrying are carried on as its lost update would have.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.storage.queue import QueueMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.batch import envelope, results
from shared.batch.lifecycle import Options
from shared.batch.results import ResultEntry
from shared.batch.settlement import settle
from shared.handlers import ItemOutcome
from shared.intake.submit import submit
from shared.ops import lifecycle, replay_marks
from shared.ops.reports import read_batch_status
from shared.services import Services
from shared.store.result_store import ResultWriter
from tests.app import handlers
from tests.app.conftest import drain_all, wait_for
from tests.app.sales import ndjson, submit_ids

WRITTEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[int, list[ResultEntry]]:
    """The records of one lineage of `n` items, one per delivery, in any attempt order: handled ones (each item
    ok, failed or left retrying) and discards (every item cancelled or expired, as the old writer did)."""
    n = draw(st.integers(1, 6))
    attempts = draw(st.lists(st.integers(1, 20), min_size=1, max_size=5, unique=True))
    found = []
    for attempt in attempts:
        blob = f"r{attempt:03d}-{draw(st.integers(0, 9))}"
        if draw(st.booleans()):
            ok = draw(st.integers(0, n))
            failed = draw(st.integers(0, n - ok))
            entry = ResultEntry(0, 0, 0, ok, failed, n - ok - failed, WRITTEN, attempt, blob)
        else:
            why = draw(st.sampled_from(["cancelled", "expired"]))
            entry = ResultEntry(0, 0, 0, 0, 0, 0, WRITTEN, attempt, blob, **{why: n})
        found.append(entry)
    return n, found


@settings(max_examples=300, deadline=None)
@given(deliveries())
def test_a_discard_never_replaces_a_recorded_outcome_whatever_the_attempt_order(
    case: tuple[int, list[ResultEntry]],
) -> None:
    n, found = case
    [chosen] = results.newest(found)
    handled = [e for e in found if e.ok + e.failed + e.retrying]
    if not handled:
        assert chosen == max(found, key=lambda e: (e.attempt, e.blob)), "no outcome: the latest discard counts"
        return
    record = max(handled, key=lambda e: (e.attempt, e.blob))
    assert (chosen.ok, chosen.failed) == (record.ok, record.failed), "the latest handled record's outcome stays"
    later = any(e not in handled and (e.attempt, e.blob) > (record.attempt, record.blob) for e in found)
    assert chosen.retrying == (0 if later else record.retrying), "a later discard settles what it left retrying"
    assert chosen.ok + chosen.failed + chosen.retrying + chosen.cancelled + chosen.expired == n
    [counted] = results.settled_counts([chosen], 1, [n]).values()
    assert (counted["ok"], counted["failed"]) == (record.ok, record.failed)


@given(st.lists(st.sampled_from(["ok", "failed", "retrying"]), min_size=1, max_size=8))
def test_a_covered_record_keeps_each_outcome_and_settles_every_item_it_left_retrying(kinds: list[str]) -> None:
    of = {kind: [p for p, k in enumerate(kinds) if k == kind] for kind in ("ok", "failed", "retrying")}
    record = {"ok": of["ok"], "values": [{"v": p} for p in of["ok"]], "retrying": of["retrying"],
              "failed": [{"i": p, "reason": "no"} for p in of["failed"]]}  # fmt: skip
    discard = {"ok": [], "failed": [], "retrying": [], "cancelled": list(range(len(kinds)))}
    merged = results.covered(record, discard)
    assert results.successes(merged) == results.successes(record)
    assert merged["failed"] == record["failed"]
    assert results.settled_positions(merged) == set(range(len(kinds)))
    assert merged["retrying"] == []
    assert sorted(merged.get("cancelled", [])) == record["retrying"]


async def first_delivery(services: Services, chunk: int) -> QueueMessage:
    """Receive chunk `chunk`'s message for 1 s (the others are left visible), as the drainer that dies does."""
    queue = services.storage.queue(services.settings.work_queue)
    async for message in queue.receive_messages(messages_per_page=32, visibility_timeout=1):
        if envelope.decode(str(message.content)).header.chunk == chunk:
            return message
        await queue.update_message(message, pop_receipt=message.pop_receipt, visibility_timeout=0)
    raise AssertionError(f"chunk {chunk} was not in the queue")


async def record_then_die(services: Services, message: QueueMessage, outcomes: list[ItemOutcome]) -> None:
    """What the dying delivery did: the handler's outcomes recorded; its message never deleted nor updated."""
    msg = envelope.decode(str(message.content))
    header, positions = msg.header, list(range(len(outcomes)))
    settled = settle(batch_id=header.batch_id, chunk=header.chunk, gen=header.gen, positions=positions,
                     outcomes=outcomes, attempt=1, max_attempts=5, items=msg.items)  # fmt: skip
    container = await services.storage.ensure_container(services.settings.results_container)
    await ResultWriter(container).write(settled.record)


async def until_visible(services: Services, count: int) -> None:
    queue = services.storage.queue(services.settings.work_queue)

    async def visible() -> bool:
        return len(await queue.peek_messages(max_messages=32)) >= count

    await wait_for(visible, 30, f"{count} chunk message(s) visible")


async def export(services: Services, batch_id: str) -> list[dict[str, Any]]:
    manifest, _, entries = await lifecycle.read(services, batch_id)
    return [line async for line in lifecycle.export(services, manifest, entries, status=None, start=0, limit=1000)]


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_chunk_handled_before_a_cancel_keeps_its_outcome_when_its_lost_delete_brings_it_back(configure):
    """Measured in the issue: `processing` {5 ok} became `cancelled` {0 ok, 10 cancelled}."""
    services = configure(CHUNK_MAX_ITEMS="5")
    batch_id = await submit_ids(services, [f"k-{i}" for i in range(10)])
    message = await first_delivery(services, 0)
    await record_then_die(services, message, [ItemOutcome.success({"n": p}) for p in range(5)])
    before = await read_batch_status(services, batch_id)
    assert (before["status"], before["items"]["succeeded"]) == ("processing", 5)

    await lifecycle.cancel(services, batch_id)
    await until_visible(services, 2)
    await drain_all(services)

    status = await read_batch_status(services, batch_id)
    assert status["status"] == "cancelled"
    assert status["items"] == {"total": 10, "succeeded": 5, "failed": 0, "cancelled": 5, "expired": 0, "pending": 0}
    lines = await export(services, batch_id)
    assert [(line["position"], line["status"], line.get("value")) for line in lines[:5]] == [
        (p, "succeeded", {"n": p}) for p in range(5)
    ], "the values the handler returned are still exported"
    assert [line["status"] for line in lines[5:]] == ["cancelled"] * 5


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_chunk_recorded_half_retrying_before_a_cancel_discards_only_the_items_it_left_retrying(configure):
    """Its update was lost too: the items it handled keep their outcome, those it left retrying are cancelled."""
    services = configure(CHUNK_MAX_ITEMS="5")
    batch_id = await submit_ids(services, [f"h-{i}" for i in range(5)])
    message = await first_delivery(services, 0)
    outcomes = [ItemOutcome.success({"n": p}) for p in range(3)] + [ItemOutcome.failure("busy")] * 2
    await record_then_die(services, message, outcomes)

    await lifecycle.cancel(services, batch_id)
    await until_visible(services, 1)
    await drain_all(services)

    status = await read_batch_status(services, batch_id)
    assert status["status"] == "cancelled"
    assert (status["items"]["succeeded"], status["items"]["cancelled"], status["items"]["pending"]) == (3, 2, 0)
    lines = await export(services, batch_id)
    assert [(line["status"], line.get("value")) for line in lines] == [
        *(("succeeded", {"n": p}) for p in range(3)),
        ("cancelled", None),
        ("cancelled", None),
    ]
    assert [line["id"] for line in lines] == [f"h-{i}" for i in range(5)]


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_completed_batch_stays_completed_when_its_recorded_chunk_comes_back_after_its_deadline(configure):
    """Measured in the issue: a batch stamped `completed` {5 ok} turned `expired` {0 ok, 5 expired}."""
    services = configure(CHUNK_MAX_ITEMS="5")
    now = datetime.now(timezone.utc)
    expires_at = now + timedelta(seconds=1)
    body, options = ndjson([f"e-{i}" for i in range(5)]), Options(expires_at=expires_at)
    done = await submit(services, body, content_type="application/x-ndjson", content_encoding=None,
                        idempotency_key=None, options=options)  # fmt: skip
    batch_id = done.manifest.batch_id
    message = await first_delivery(services, 0)
    await record_then_die(services, message, [ItemOutcome.success({"n": p}) for p in range(5)])
    final = await lifecycle.finalize(services, batch_id)
    assert final is not None
    assert final["status"] == "completed"

    async def past_deadline() -> bool:
        return datetime.now(timezone.utc) > expires_at

    await wait_for(past_deadline, 10, "the batch's deadline")
    await until_visible(services, 1)
    report = await drain_all(services)

    assert report.discarded == 0, "no item of it was left to discard"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert (status["items"]["succeeded"], status["items"]["expired"]) == (5, 0)
    assert [line["status"] for line in await export(services, batch_id)] == ["succeeded"] * 5


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_final_batch_keeps_its_failure_when_its_recorded_chunk_comes_back_and_would_now_succeed(configure):
    """Lifecycle seed 27: an item parked after its last attempt, the batch stamped and noticed
    `completed_with_failures`; the delete lost, the chunk came back, its handler succeeded, and the batch read
    `completed`, contradicting its notice."""
    services = configure(CHUNK_MAX_ITEMS="5", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"f-{i}" for i in range(3)])
    message = await first_delivery(services, 0)
    outcomes = [ItemOutcome.failure("gone", retryable=False), *(ItemOutcome.success({"n": p}) for p in (1, 2))]
    await record_then_die(services, message, outcomes)
    final = await lifecycle.finalize(services, batch_id)
    assert final is not None
    assert final["status"] == "completed_with_failures"

    await until_visible(services, 1)
    await drain_all(services)

    assert not handlers.calls, "no item the record settled is handled again"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed_with_failures"
    assert (status["items"]["succeeded"], status["items"]["failed"], status["items"]["pending"]) == (2, 1, 0)
    assert [line["status"] for line in await export(services, batch_id)] == ["failed", "succeeded", "succeeded"]
    queue = services.storage.queue(services.settings.work_queue)
    assert await queue.peek_messages(max_messages=32) == [], "its message is deleted"


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_chunk_recorded_half_retrying_whose_update_was_lost_runs_only_the_items_it_left_retrying(configure):
    """The items it handled keep their values; those it left retrying are handled once, as its retry would have."""
    services = configure(CHUNK_MAX_ITEMS="5", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"r-{i}" for i in range(5)])
    message = await first_delivery(services, 0)
    outcomes = [ItemOutcome.success({"n": p}) for p in range(3)] + [ItemOutcome.failure("busy")] * 2
    await record_then_die(services, message, outcomes)

    await until_visible(services, 1)
    await drain_all(services)

    assert dict(handlers.calls) == {"r-3": 1, "r-4": 1}
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    lines = await export(services, batch_id)
    assert [line.get("value") for line in lines] == [
        *({"n": p} for p in range(3)),
        {"seen": "r-3"},
        {"seen": "r-4"},
    ]


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_recorded_chunk_that_comes_back_leaves_the_items_a_replay_claimed_to_that_replay(configure):
    """Its failure was parked and the parked chunk replayed (the parent record marked) before the lost delete
    brought the message back: the replay carries that item, the redelivery neither runs nor re-sends it."""
    services = configure(CHUNK_MAX_ITEMS="5", HANDLER="tests.app.handlers:record")
    await submit_ids(services, ["c-0", "c-1"])
    message = await first_delivery(services, 0)
    await record_then_die(services, message, [ItemOutcome.failure("gone", retryable=False), ItemOutcome.success()])
    parked = envelope.retry_header(envelope.decode(str(message.content)).header, [0])
    marked, _ = await replay_marks.claim(services, parked)
    assert marked is replay_marks.Parent.MARKED

    await until_visible(services, 1)
    await drain_all(services)

    assert not handlers.calls, "the item the replay claimed is the replay's to carry"
    queue = services.storage.queue(services.settings.work_queue)
    assert await queue.peek_messages(max_messages=32) == [], "its message is deleted"
