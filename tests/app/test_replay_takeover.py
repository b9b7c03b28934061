"""A replay that died between its claim and its send is finished by the fallback timer (lifecycle seed 606), real
Azurite: before, only a later replay of the same chunk took its claim over, and with none the batch stayed
`processing` for good."""

from __future__ import annotations

from shared.ops.reports import read_batch_status
from shared.store import replay_claims
from tests.app import handlers
from tests.app.conftest import RecordingPublisher
from tests.app.parked import finish, parked, parking, post_replay
from tests.app.test_replay_failures import dies_after_its_claim, export


async def test_a_replay_that_died_after_its_claim_is_finished_by_the_timer(configure, app_functions, monkeypatch):
    from shared.ops import replay_marks, replay_takeover

    services = parking(configure, chunk_max_items=1, publisher=RecordingPublisher())
    batch_id = await parked(services)
    before = await read_batch_status(services, batch_id)
    assert before["items"] == {"total": 40, "succeeded": 36, "failed": 3, "pending": 1}, before
    services.handler = handlers.record  # the cause is fixed
    await dies_after_its_claim(monkeypatch, app_functions, batch_id)
    state = services.storage.container(services.settings.state_container)
    assert len(await replay_claims.listed(state)) == 1, "the dead replay's note stays"
    assert (await read_batch_status(services, batch_id))["items"]["pending"] == 2, "a claim left behind"

    assert await replay_takeover.take_over(services) == 0, "a claim younger than CLAIM_S is left alone"
    monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    monkeypatch.setattr(replay_takeover, "MARGIN_S", -60)
    assert await replay_takeover.take_over(services) == 1, "the timer finishes the replay: its chunk goes back"
    assert await replay_claims.listed(state) == [], "and its note goes"
    assert await replay_takeover.take_over(services) == 0, "once"

    status = await finish(services, batch_id)
    assert status["items"] == {"total": 40, "succeeded": 38, "failed": 2, "pending": 0}, status
    assert status["status"] == "completed_with_failures", status


async def test_a_dead_replays_claim_goes_back_when_its_batch_ends_and_its_chunk_is_set_aside(
    configure, app_functions, monkeypatch
):
    """Lifecycle seeds 504 and 582: the batch was cancelled after the dead replay's claim, and a later replay set
    the parked chunk aside (its batch ended: never replayed). Nothing carried the claimed item, so the batch stayed
    `cancelling` with it pending. Setting the chunk aside now gives the claim back: the item is failed with the reason
    it had, and the batch becomes final."""
    from shared.batch import lifecycle as ending
    from shared.ops import lifecycle, replay_marks

    services = parking(configure, chunk_max_items=1, publisher=RecordingPublisher())
    batch_id = await parked(services)
    before = [line for line in await export(app_functions, batch_id) if line["status"] == "failed"]
    services.handler = handlers.record
    await dies_after_its_claim(monkeypatch, app_functions, batch_id)
    await lifecycle.end(services, batch_id, ending.CANCELLED)  # cancelled while the claim holds an item
    monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    code, answer = await post_replay(app_functions, {"all": True})
    assert (code, answer["replayed"], answer["set_aside"]) == (200, 0, 3), answer
    status = await finish(services, batch_id)
    assert status["items"]["pending"] == 0, status
    assert status["status"] == "cancelled", status
    failed = [line for line in await export(app_functions, batch_id) if line["status"] == "failed"]
    assert failed == before, "the same items failed, each with the reason it had"
