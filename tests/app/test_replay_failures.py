"""A replay that meets trouble or old state: Service Bus down, a failure part way, a takeover, stale parked copies,
final and ended batches, and which parked chunks a limited replay takes (real Azurite)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from azure.storage.queue.aio import QueueClient

from shared.core import layout
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.held import hold_first_chunk
from tests.app.parked import call, final_with_parked, finish, parked, parking, post_replay


@pytest.mark.slow
async def test_a_replay_that_meets_service_bus_down_rings_its_doorbell_and_arms_its_look_once_it_answers(
    configure, app_functions
):
    publisher = RecordingPublisher()
    services = parking(configure, publisher=publisher)
    batch_id = await parked(services)
    services.handler = handlers.record
    publisher.events.clear()
    container = await services.storage.ensure_container(services.settings.state_container)
    await container.delete_blob(layout.look_blob(services.settings.work_queue))  # its submit's chain has ended
    publisher.down = True

    body = json.dumps({"batch_id": batch_id}).encode()
    code, replayed = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))
    assert (code, replayed["replayed"]) == (200, 3)
    assert services.deferred.pending() == [services.settings.work_queue], "this process keeps the doorbell"
    publisher.down = False

    for _ in range(100):
        if len(publisher.events) == 2:
            break
        await asyncio.sleep(0.1)
    assert publisher.reasons() == ["replay", "look"]
    assert (await finish(services, batch_id))["status"] == "completed"


def failing(monkeypatch: Any, target: Any, name: str, after: int) -> None:
    """Storage fails at `target.name` from its call number `after` on (a fault injected where no real outage
    can be timed this finely; the tests in tests/faults take Azurite down for real)."""
    from shared.core.errors import StorageUnavailable

    real = getattr(target, name)
    calls = {"n": 0}

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after:
            raise StorageUnavailable(name, "storage is down (injected)")
        return await real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)


async def dies_after_its_claim(monkeypatch: Any, app_functions: Any, batch_id: str) -> None:
    """A replay of the batch that claims its first parked chunk and dies there: the lane's mark fails after the
    claim, and so does the claim's take-back."""
    from shared.engine import lane_queues
    from shared.ops import replay_marks

    failing(monkeypatch, lane_queues, "mark", after=0)  # the replay fails after its claim...
    failing(monkeypatch, replay_marks, "write_json", after=1)  # ...and cannot take it back: it died there
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert code == 503, answer
    monkeypatch.undo()


@pytest.mark.parametrize("where", ["mark-after", "second-chunk"])
async def test_a_replay_that_fails_part_way_has_already_rung_for_the_chunks_it_put_back(
    configure, app_functions, monkeypatch, where
):
    from shared.engine import lane_queues
    from shared.ops import replay_marks

    publisher = RecordingPublisher()
    services = parking(configure, chunk_max_items=1, publisher=publisher)
    batch_id = await parked(services)
    container = await services.storage.ensure_container(services.settings.state_container)
    await container.delete_blob(layout.look_blob(services.settings.work_queue))  # its submit's chain has ended
    publisher.events.clear()
    if where == "mark-after":
        failing(monkeypatch, lane_queues, "mark", after=1)  # the mark before the chunk goes back works
    else:
        failing(monkeypatch, replay_marks, "list_entries", after=1)
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    work = services.storage.queue(services.settings.work_queue)
    assert (await work.get_queue_properties()).approximate_message_count >= 1, "a chunk went back"
    assert publisher.reasons() == ["replay", "look"], (code, answer, publisher.reasons())


@pytest.mark.parametrize("where", ["lane-mark", "send", "killed"])
async def test_a_replay_that_fails_part_way_leaves_a_state_a_later_replay_completes(
    configure, app_functions, monkeypatch, where
):
    """Issue 36 item 1. A replay claims a parked chunk by marking its items retrying in the parent record, then
    marks the lane and sends the chunk. When the lane's mark or the send fails, the claim is taken back (the items
    are failed again, with their reasons); when the replay dies after its claim (here: the take-back fails too),
    a later replay takes the claim over once it is CLAIM_S old. Either way the batch reads as it did, and a later
    replay completes it: no chunk is left counted pending with nothing to carry it."""
    from shared.engine import lane_queues

    publisher = RecordingPublisher()
    services = parking(configure, chunk_max_items=1, publisher=publisher)
    batch_id = await parked(services)
    before = await read_batch_status(services, batch_id)
    assert before["items"] == {"total": 40, "succeeded": 36, "failed": 3, "pending": 1}, before
    lines = await export(app_functions, batch_id)
    publisher.events.clear()
    services.handler = handlers.record  # the cause is fixed
    if where == "send":
        failing(monkeypatch, lane_queues, "mark", after=1)  # the lane's mark works; the send below does not
        monkeypatch.setattr(QueueClient, "send_message", refused_send)
    else:
        failing(monkeypatch, lane_queues, "mark", after=0)
    if where == "killed":
        from shared.ops import replay_marks

        failing(monkeypatch, replay_marks, "write_json", after=1)  # the claim is written, its take-back is not
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert code == 503, answer
    work = services.storage.queue(services.settings.work_queue)
    assert (await work.get_queue_properties()).approximate_message_count == 1, "nothing went back (one held)"
    monkeypatch.undo()
    if where == "killed":
        assert (await read_batch_status(services, batch_id))["items"]["pending"] == 2, "a claim left behind"
        code, answer = await post_replay(app_functions, {"batch_id": batch_id})
        assert (code, answer["replayed"]) == (200, 2), "a replay leaves a fresh claim alone"
        monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    else:
        assert (await read_batch_status(services, batch_id))["items"] == before["items"], "it reads as before"
        assert await export(app_functions, batch_id) == lines, "the failures' reasons are back"
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 1 if where == "killed" else 3), answer
    status = await finish(services, batch_id)
    assert status["status"] == "completed", status
    assert status["items"] == {"total": 40, "succeeded": 40, "failed": 0, "pending": 0}, status


async def test_a_takeover_carries_the_parked_items_not_a_follow_up_of_the_same_generation(
    configure, app_functions, monkeypatch
):
    """Issue 36 item 1's takeover. A chunk whose attempt parks one item (failed for good) and leaves another
    retrying sends two chunks of the next generation: the parked copy and the follow-up. A replay that dies after
    its claim leaves the parked item retrying under its claim; the follow-up's record, of the same generation,
    does not carry it, so a later replay takes the claim over instead of deleting the parked copy as stale."""
    from shared.ops import replay_marks

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:mixed_once", CHUNK_MAX_ITEMS="5")
    ids = [f"lead-{i}" for i in range(5)] + ["ok-5", "trans-6", "ok-7", "perm-8", "ok-9"]
    done = await submit(
        services, "\n".join(json.dumps({"id": i}) for i in ids).encode(), content_type="application/x-ndjson",
        content_encoding=None, idempotency_key=None,
    )  # fmt: skip
    batch_id = str(done.manifest.batch_id)
    held = await hold_first_chunk(services)  # the batch is not final: its parked chunk can be replayed
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["items"] == {"total": 10, "succeeded": 4, "failed": 1, "pending": 5}, status  # trans-6 settled
    services.handler = handlers.record  # the cause is fixed
    await dies_after_its_claim(monkeypatch, app_functions, batch_id)
    assert (await read_batch_status(services, batch_id))["items"]["pending"] == 6, "a claim left behind"
    monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 1), answer
    await held.release()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed", status
    assert status["items"] == {"total": 10, "succeeded": 10, "failed": 0, "pending": 0}, status


async def refused_send(*args: Any, **kwargs: Any) -> Any:
    """A queue's send that fails (a re-enqueue that storage refuses)."""
    from shared.core.errors import StorageUnavailable

    raise StorageUnavailable("send_message", "storage is down (injected)")


async def test_a_stale_parked_copy_whose_items_a_later_attempt_settled_is_deleted(configure, app_functions):
    from shared.store import poison_index

    services = parking(configure)
    batch_id = await parked(services)
    poison_name = services.settings.poison_queue(services.settings.work_queue)
    state = services.storage.container(services.settings.state_container)
    copies = await poison_index.find(state, poison_name, batch_id=batch_id, message_ids=None, limit=10)
    services.handler = handlers.record  # the cause is fixed: replay, and the replayed chunks succeed
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 3), answer
    await drain_all(services)
    assert (await read_batch_status(services, batch_id))["items"]["succeeded"] == 30, "all but the held chunk"
    # The same chunks parked twice (a redelivery's second park): copies whose items are settled now.
    poison = services.storage.queue(poison_name)
    for entry in copies:
        sent = await poison.send_message(entry.text)
        await poison_index.add(
            state, poison_index.Entry(poison_name, sent.id, sent.pop_receipt, None, batch_id, entry.text)
        )
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"], len(answer["skipped"])) == (200, 0, 3), answer
    assert all("deleted" in s["why"] for s in answer["skipped"]), answer
    assert (await poison.get_queue_properties()).approximate_message_count == 0
    assert await poison_index.find(state, poison_name, batch_id=batch_id, message_ids=None, limit=10) == []
    assert (await finish(services, batch_id))["items"]["succeeded"] == 40


async def test_a_limited_replay_takes_the_oldest_parked_chunks_whatever_their_message_ids(configure):
    from shared.store import poison_index

    services = configure(publisher=RecordingPublisher())
    name = services.settings.poison_queue(services.settings.work_queue)
    state = await services.storage.ensure_container(services.settings.state_container)
    for message_id in ("f" * 8, "0" * 8, "8" * 8):  # parked in this order; message-id order is another
        await poison_index.add(state, poison_index.Entry(name, message_id, "r", None, None, "x"))
        await asyncio.sleep(0.002)
    oldest = await poison_index.find(state, name, batch_id=None, message_ids=None, limit=2)
    assert [e.message_id for e in oldest] == ["f" * 8, "0" * 8]


def outcome(status: dict[str, Any]) -> tuple[Any, ...]:
    return status["status"], status["items"], status["chunks"], status["completed_at"]


async def export(app_functions: Any, batch_id: str) -> list[Any]:
    request = http_request("GET", f"/api/batches/{batch_id}/results", batch_id=batch_id)
    response = await app_functions["batch_results"](request)
    assert response.status_code == 200
    return [json.loads(line) for line in response.get_body().splitlines()]


async def test_a_replay_of_a_final_batch_is_refused_and_changes_nothing(configure, app_functions):
    """Issue 36 item 12: a final batch's outcome never changes, so a replay naming it is a 409 `batch_final`;
    its status, export and parked chunks stay what they were, and nothing goes back on the work queue."""
    services = parking(configure)
    batch_id = await final_with_parked(services)
    before = await read_batch_status(services, batch_id)
    assert before["status"] == "completed_with_failures"
    lines = await export(app_functions, batch_id)
    services.handler = handlers.record  # the cause is fixed, but the batch's outcome was reported
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["error"]["code"]) == (409, "batch_final"), answer
    assert "new batch" in answer["error"]["message"]
    await drain_all(services)
    assert outcome(await read_batch_status(services, batch_id)) == outcome(before)
    assert await export(app_functions, batch_id) == lines
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    assert (await poison.get_queue_properties()).approximate_message_count == 3, "still parked, for inspection"


async def test_a_replay_of_everything_sets_aside_ended_and_final_batches_chunks_without_spending_its_limit(
    configure, app_functions
):
    """Issue 36 items 5 and 12: the oldest parked chunks are those of a cancelled batch and of a final one; a
    replay of everything with `limit: 1` sets them aside (out of the poison queue, still inspectable) and
    replays the oldest chunk of a batch still processing, instead of answering `replayed 0, more true` forever."""
    from shared.ops import lifecycle

    services = parking(configure)
    cancelled = await parked(services)
    await lifecycle.cancel(services, cancelled)
    final = await final_with_parked(services)
    open_id = await parked(services)
    statuses = {b: outcome(await read_batch_status(services, b)) for b in (cancelled, final)}
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    assert (await poison.get_queue_properties()).approximate_message_count == 9
    first_final = next(m for m in await poison.peek_messages(max_messages=32) if final in m.content).id

    code, answer = await post_replay(app_functions, {"all": True, "limit": 1})
    assert code == 200, answer
    assert (answer["replayed"], answer["set_aside"], answer["more"]) == (1, 6, True), answer
    assert {c["batch_id"] for c in answer["chunks"]} == {open_id}
    assert (await poison.get_queue_properties()).approximate_message_count == 2
    code, answer = await post_replay(app_functions, {"all": True})
    assert (code, answer["replayed"], answer["set_aside"], answer["more"]) == (200, 2, 0, False), answer
    assert (await poison.get_queue_properties()).approximate_message_count == 0, "poison depth back to 0"
    for batch_id, status in statuses.items():
        assert outcome(await read_batch_status(services, batch_id)) == status, "a set-aside chunk changes nothing"
    code, kept = await call(
        app_functions, "poison_detail", http_request("GET", f"/api/poison/{first_final}", message_id=first_final)
    )
    assert code == 200, kept
    assert (kept["batch_id"], kept["replayable"]) == (final, False)
    assert "final" in kept["set_aside"], kept
    services.handler = handlers.record
    assert (await finish(services, open_id))["status"] == "completed"
