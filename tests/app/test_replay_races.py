"""Replay races of the drain engine a code review found (issue 18, items 7 and 10), each reproduced at its await point
against the real Azurite: a duplicate parked copy whose items are no longer failed, and a concurrent change of the
parent record."""

from __future__ import annotations

from typing import Any

import pytest

from shared.store import poison_index
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.held import Held, hold_first_chunk
from tests.app.sales import poison_messages, submit_ids

# -- 7 and 10: replay races ---------------------------------------------------------------------------------

FIXED = {"now": False}


async def fixable(items: list[Any], context: Any) -> Any:
    """`bad-*` items fail permanently until FIXED["now"]; everything else succeeds."""
    from shared.handlers import ChunkResult, ItemOutcome

    out = []
    for item in items:
        handlers.calls[item["id"]] += 1
        broken = item["id"].startswith("bad-") and not FIXED["now"]
        out.append(ItemOutcome.failure("bad item", retryable=False) if broken else ItemOutcome.success())
    return ChunkResult(out)


@pytest.fixture
def fixable_handler():
    FIXED["now"] = False
    yield "tests.app.test_replay_races:fixable"
    FIXED["now"] = False


async def parked_then_fixed(configure, handler: str) -> tuple[Any, str]:
    """Chunk 1 (ok-1, bad-1, ok-2) parked while chunk 0 is held back (the batch is not final), then the cause
    fixed; `finish` releases chunk 0."""
    services = configure(publisher=RecordingPublisher(), HANDLER=handler, CHUNK_MAX_ITEMS="3")
    batch_id = await submit_ids(services, ["held-1", "held-2", "held-3", "ok-1", "bad-1", "ok-2"])
    HELD[batch_id] = await hold_first_chunk(services)
    await drain_all(services)
    assert len(await poison_messages(services)) == 1
    FIXED["now"] = True
    return services, batch_id


HELD: dict[str, Held] = {}


async def finish(services: Any, batch_id: str) -> None:
    await HELD.pop(batch_id).release()
    await drain_all(services)


async def counts(services: Any, batch_id: str) -> dict[str, int]:
    from shared.ops.reports import read_batch_status

    return (await read_batch_status(services, batch_id))["items"]


async def test_a_duplicate_parked_copy_is_not_replayed_once_its_items_are_no_longer_failed(configure, fixable_handler):
    """The same parked chunk twice in the poison queue (a send repeated after a crash): the second copy's
    parent no longer holds its items as failed, so it is skipped, and the item is counted once."""
    from shared.ops import replay

    services, batch_id = await parked_then_fixed(configure, fixable_handler)
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    (original,) = await poison.peek_messages()
    # The duplicate, parked and indexed as a drainer redoing the chunk after a crash would leave it.
    copy = await poison.send_message(original.content)
    state = services.storage.container(services.settings.state_container)
    entry = poison_index.Entry(poison.queue_name, copy.id, copy.pop_receipt, None, batch_id, original.content)
    await poison_index.add(state, entry)

    answer = await replay.replay(services, batch_id=batch_id)
    await finish(services, batch_id)

    assert answer["replayed"] == 1
    assert [s["why"] for s in answer["skipped"]] == [
        "its items are no longer failed (it was replayed already, or its record is missing)"
    ]
    assert await counts(services, batch_id) == {"total": 6, "succeeded": 6, "failed": 0, "pending": 0}
    assert handlers.calls["bad-1"] == 2, "once failed, once replayed: not twice replayed"


async def test_a_replay_meeting_a_concurrent_change_of_the_parent_record_reads_it_again(
    configure, fixable_handler, monkeypatch
):
    """Between the replay's read of the parent record and its conditional write, another writer rewrites the
    record (a concurrent replay, or a redelivery's group commit). The write's precondition fails; the replay
    must read again and move the items, not go on with them still failed (they would count twice)."""
    from shared.batch import results
    from shared.ops import replay, replay_marks
    from shared.store import storage

    services, batch_id = await parked_then_fixed(configure, fixable_handler)
    real_read = storage.read_json
    raced: list[str] = []

    async def read_then_race(container: Any, name: str) -> Any:
        doc, etag = await real_read(container, name)
        if not raced and name.startswith(f"{batch_id}/"):
            raced.append(name)
            # The other writer: the same record, a new etag.
            await storage.write_json(container, name, doc, metadata=results.blob_metadata(doc))
        return doc, etag

    monkeypatch.setattr(replay_marks, "read_json", read_then_race)
    answer = await replay.replay(services, batch_id=batch_id)
    await finish(services, batch_id)

    assert raced, "the race was injected"
    assert answer["replayed"] == 1
    assert await counts(services, batch_id) == {"total": 6, "succeeded": 6, "failed": 0, "pending": 0}
