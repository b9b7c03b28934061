"""A replay call that judged its batch open, and a finalize that stamps the batch final while the call goes on (the
simulation's replay seed 787: a replay of everything whose poison index calls storage answered seconds late). The
claim and the stamp are made exclusive through the manifest's ETag (`shared.store.claim_fence`): whichever comes
second gives way, so a batch stamped final is never replayed and a stamp never states what a replay then changes.
Real Azurite; the racing writes are run at the claim's own write (`shared.ops.replay_marks`)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.ops import lifecycle, replay, replay_marks
from shared.ops.reports import read_batch_status
from shared.store import ended
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.held import hold_first_chunk
from tests.app.sales import poison_messages, submit_ids
from tests.app.test_replay_races import FIXED, fixable_handler  # noqa: F401 (a fixture)


async def straddled(configure: Any, handler: str, monkeypatch: Any, at_claim: Any) -> tuple[Any, str, dict[str, Any]]:
    """Chunk 1 (ok-1, bad-1, ok-2) parked while chunk 0 is held back, so a replay of chunk 1 judges the batch open;
    at the replay's claim of chunk 1, `at_claim(services, batch_id)` runs first: the cause is fixed and chunk 0
    drains (the batch is then final by its records, `completed_with_failures`, unstamped). The replay's answer."""
    services = configure(publisher=RecordingPublisher(), HANDLER=handler, CHUNK_MAX_ITEMS="3")
    batch_id = await submit_ids(services, ["held-1", "held-2", "held-3", "ok-1", "bad-1", "ok-2"])
    held = await hold_first_chunk(services)
    await drain_all(services)
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    (parked,) = await poison.peek_messages()
    real_write = replay_marks.write_json
    raced: list[str] = []

    async def write_json(container: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(name)
            FIXED["now"] = True
            await held.release()
            await drain_all(services)
            manifest, _ = await ended.read_manifest(services.storage.container(services.settings.batches_container),
                                                    batch_id)  # fmt: skip
            assert manifest.final_status is None, "final by its records, not stamped yet"
            await at_claim(services, batch_id)
        return await real_write(container, name, *args, **kwargs)

    monkeypatch.setattr(replay_marks, "write_json", write_json)
    answer = await replay.replay(services, message_ids={parked.id})
    assert raced, "the claim was raced"
    monkeypatch.setattr(replay_marks, "write_json", real_write)
    return services, batch_id, answer


async def stamp_of(services: Any, batch_id: str) -> str | None:
    manifest, _ = await ended.read_manifest(services.storage.container(services.settings.batches_container), batch_id)
    return manifest.final_status


async def test_a_batch_stamped_final_after_the_replay_judged_it_open_is_not_replayed(
    configure,
    fixable_handler,  # noqa: F811
    monkeypatch,
):
    """The stamp lands between the call's judgement and its claim: the claim finds it, goes back, and the chunk is
    set aside. Without the fence the chunk went back, bad-1 succeeded, and the status route said `completed` under
    a `completed_with_failures` stamp."""

    async def stamp(services: Any, batch_id: str) -> None:
        assert (await lifecycle.finalize(services, batch_id) or {}).get("status") == "completed_with_failures"

    services, batch_id, answer = await straddled(configure, fixable_handler, monkeypatch, stamp)
    await drain_all(services)  # whatever went back is handled

    assert (answer["replayed"], answer["set_aside"]) == (0, 1), answer
    status = await read_batch_status(services, batch_id)
    assert status["status"] == await stamp_of(services, batch_id) == "completed_with_failures"
    assert status["items"] == {"total": 6, "succeeded": 5, "failed": 1, "pending": 0}
    assert handlers.calls["bad-1"] == 1, "never handled again"
    assert await poison_messages(services) == [], "set aside: out of the poison queue"


async def test_a_finalize_that_listed_before_the_claim_stamps_nothing(
    configure,
    fixable_handler,  # noqa: F811
    monkeypatch,
):
    """The finalize reads the manifest and lists the records (final by them) before the claim, and stamps after
    the replay: its ETag is gone, so it stamps nothing, and the batch ends `completed` once the replayed chunk is
    handled, its stamp and its status route agreeing. Without the fence it stamped `completed_with_failures`."""
    before: list[Any] = []

    async def read(services: Any, batch_id: str) -> None:
        before.append(await lifecycle.read(services, batch_id))

    services, batch_id, answer = await straddled(configure, fixable_handler, monkeypatch, read)
    assert answer["replayed"] == 1, answer
    assert await lifecycle._finalized(services, batch_id, *before[0]) is None, "a stale read stamps nothing"
    assert await stamp_of(services, batch_id) is None

    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == await stamp_of(services, batch_id) == "completed"
    assert status["items"] == {"total": 6, "succeeded": 6, "failed": 0, "pending": 0}


@pytest.fixture(autouse=True)
def _counted() -> None:
    handlers.calls.clear()


async def test_a_claim_that_cannot_go_back_after_the_fence_met_a_stamp_leaves_the_chunk_parked_for_the_timer(
    configure,
    fixable_handler,  # noqa: F811
    monkeypatch,
):
    """As the first test, but storage refuses to give the claim back: set aside, the chunk would take its claim
    with it (the items `retrying` under a final stamp for good, the note's takeover finding nothing parked). It
    stays parked, with its note, for the timer's takeover."""
    from shared.store import replay_claims

    async def stamp(services: Any, batch_id: str) -> None:
        await lifecycle.finalize(services, batch_id)

    async def refused(*args: Any) -> bool:
        return False

    monkeypatch.setattr(replay_marks, "release", refused)
    services, batch_id, answer = await straddled(configure, fixable_handler, monkeypatch, stamp)

    assert (answer["replayed"], answer["set_aside"]) == (0, 0), answer
    assert [s["why"] for s in answer["skipped"]] == [
        "its batch is final: the timer sets it aside once its claim can be taken over"
    ]
    assert len(await poison_messages(services)) == 1, "still parked"
    notes = await replay_claims.listed(services.storage.container(services.settings.state_container))
    assert len(notes) == 1, "its note stays for the takeover"
    assert await stamp_of(services, batch_id) == "completed_with_failures"
