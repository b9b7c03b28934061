"""The fallback's look chain (shared.watch.lookout) on the real Azurite: armed by work, ended by an empty queue, never
left unarmed while a queue holds messages.

Events go to a recording publisher (tests/app/conftest.py says why): these tests must see which looks were
scheduled, for when, and deliver them by hand at the moment that matters. The chain through the real broker and
the real host is in tests/host/test_look_chain.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.core import layout
from shared.core.events import Reason, TriggerEvent
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status, read_queue_status
from shared.router import route
from shared.store.received import epoch_ms
from shared.store.storage import write_json
from shared.watch import fallback, inspect, lookout
from tests.app.conftest import RecordingPublisher, another_instance, drain_all

NDJSON = b'{"id":"l-1","amount":"5.00","currency":"EUR","author":"a","distributor":"d"}\n'
FLOOR_MS = 10_000  # a look comes up to 3 s early by the clocks: a write slower than 7 s sends another


async def submit_one(services, body: bytes = NDJSON) -> str:
    done = await submit(
        services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    return done.manifest.batch_id


def looks(publisher: RecordingPublisher) -> list[tuple[TriggerEvent, float]]:
    """The look events published, with how far ahead (s) each was scheduled when it was sent."""
    return [(e, at.timestamp() - time.time()) for e, at in publisher.events if e.reason is Reason.LOOK and at]


def others(publisher: RecordingPublisher) -> list[str]:
    return [e.reason.value for e, _ in publisher.events if e.reason is not Reason.LOOK]


@pytest.fixture
async def services(configure):
    return configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS=str(FLOOR_MS), BACKOFF_JITTER="0")


async def test_a_submit_arms_one_look_at_the_floor_and_a_second_submit_finds_it_armed(services):
    await submit_one(services)
    await submit_one(services)

    scheduled = looks(services.publisher)
    assert len(scheduled) == 1, "one chain per queue, however many submits"
    event, ahead_s = scheduled[0]
    assert event.queue == services.settings.work_queue
    assert 0 < ahead_s <= FLOOR_MS / 1000
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert chain.token == event.token
    assert others(services.publisher) == ["submitted", "submitted"]


async def test_a_look_at_a_queue_left_empty_ends_the_chain_and_the_next_submit_arms_it_again(services):
    await submit_one(services)
    await drain_all(services)
    [(first, _)] = looks(services.publisher)

    report = await route(services, first)

    assert report.outcome == "look-idle"
    assert len(looks(services.publisher)) == 1, "an empty queue has nothing to lose: no next look"
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert not chain.armed(epoch_ms())
    await submit_one(services)
    assert len(looks(services.publisher)) == 2, "the next work arms the chain again"


async def test_a_look_finds_work_whose_doorbell_was_lost_calls_a_drainer_and_keeps_looking(services):
    batch_id = await submit_one(services)  # its `submitted` event is recorded, never delivered: lost
    [(first, _)] = looks(services.publisher)

    report = await route(services, first)

    assert report.outcome == "look-triggered"
    assert others(services.publisher)[-1] == "fallback"
    [_, (second, ahead_s)] = looks(services.publisher)
    assert 0 < ahead_s <= FLOOR_MS / 1000, "work found: the next look at the floor"
    await drain_all(services, reason=Reason.FALLBACK)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
    assert (await route(services, second)).outcome == "look-idle"
    assert (await route(services, first)).outcome == "look-superseded", "a look delivered twice acts once"


async def test_messages_that_only_wait_out_a_retry_delay_are_looked_at_less_and_less_often(configure):
    from shared.core.backoff import PollPolicy
    from shared.core.settings import Decrease

    policy = PollPolicy(floor_ms=1_000, ceiling_ms=5_000, exponent=2.0, jitter=0.0, decrease=Decrease.RESET)
    intervals = [lookout.next_interval_ms("waiting", 0, policy)]
    while len(intervals) < 5:
        intervals.append(lookout.next_interval_ms("waiting", intervals[-1], policy))
    assert intervals == [2_000, 4_000, 5_000, 5_000, 5_000]
    assert lookout.next_interval_ms("busy", 5_000, policy) == 1_000
    assert lookout.next_interval_ms("triggered", 5_000, policy) == 1_000


async def test_a_submit_racing_the_look_that_ends_the_chain_is_never_left_without_a_look(services, monkeypatch):
    """The look read the queue empty; before it ends the chain, a submit enqueues and finds the chain still armed
    (so arms nothing). The look must see that submit's work when it looks again after ending the chain."""
    await submit_one(services)
    await drain_all(services)
    [(first, _)] = looks(services.publisher)
    real_inspect = inspect.inspect
    racing: list[str] = []
    elsewhere = another_instance(services)

    async def inspect_then_a_submit_lands(*args, **kwargs):
        found = await real_inspect(*args, **kwargs)
        racing.append(await submit_one(elsewhere))
        return found

    monkeypatch.setattr(inspect, "inspect", inspect_then_a_submit_lands)

    try:
        report = await route(services, first)
    finally:
        await elsewhere.storage.close()

    assert racing, "the racing submit ran between the look's two reads"
    assert report.outcome == "look-work-arrived"
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert chain.armed(epoch_ms())
    assert chain.token == looks(services.publisher)[-1][0].token


@pytest.mark.slow
async def test_a_look_that_cannot_send_the_next_one_unarms_the_chain_and_this_process_arms_it_later(services):
    """Failing the look would have Service Bus deliver it 10 times and dead-letter it, its chain "armed" until
    GRACE_MS past due."""
    batch_id = await submit_one(services)
    queue = services.settings.work_queue
    [(first, _)] = looks(services.publisher)
    await services.backoff.save(queue, services.backoff.policy.after_idle(
        services.backoff.policy.initial(epoch_ms()), now_ms=epoch_ms(), u=0.5))  # fmt: skip
    services.publisher.down = True

    report = await route(services, first)  # work found, drained here, but the next look cannot be sent

    assert report.outcome.startswith("look-"), report
    assert (await read_batch_status(services, batch_id))["status"] == "completed", "drained here meanwhile"
    chain, _ = await lookout.read(services, queue)
    assert not chain.armed(epoch_ms()), "unarmed at once: the next submit or the deferral arms it"
    assert services.deferred.pending() == [queue], "this process tries again"
    assert (await services.backoff.load(queue, epoch_ms())).is_due(epoch_ms()), "the timer's next tick looks"
    services.publisher.down = False
    # The deferral tries again 2 s after the refusal, then 4 s later, 8 s... and is done once it armed the chain.
    # It may have tried once before Service Bus came back (on a loaded machine these reads take seconds), and an
    # arm whose write outlasts the floor's margin sends a second look (`lookout.schedule`): wait for the deferral,
    # not for a count of looks.
    for _ in range(600):
        if not services.deferred.pending():
            break
        await asyncio.sleep(0.1)
    assert services.deferred.pending() == [], "armed once Service Bus answered"
    [_, *later] = looks(services.publisher)
    assert later, "the deferral sent the next look"
    chain, _ = await lookout.read(services, queue)
    assert chain.token == later[-1][0].token
    assert (await route(services, first)).outcome == "look-superseded"


async def test_a_look_that_storage_fails_after_it_ended_the_chain_goes_on_when_delivered_again(services, monkeypatch):
    """The racing submit found the chain armed (so armed nothing); storage then fails at the look's second read.
    Service Bus delivers the look again: it must go on from its ended write, not find itself superseded."""
    from shared.core.errors import StorageUnavailable

    await submit_one(services)
    await drain_all(services)
    [(first, _)] = looks(services.publisher)
    real_inspect, real_depth = inspect.inspect, inspect.depth_of
    elsewhere = another_instance(services)
    failures = [StorageUnavailable("depth", "storage is down (injected)")]

    async def inspect_then_a_submit_lands(*args, **kwargs):
        found = await real_inspect(*args, **kwargs)
        await submit_one(elsewhere)
        return found

    async def depth_fails_once(*args, **kwargs):
        if failures:
            raise failures.pop()
        return await real_depth(*args, **kwargs)

    monkeypatch.setattr(inspect, "inspect", inspect_then_a_submit_lands)
    monkeypatch.setattr(inspect, "depth_of", depth_fails_once)
    try:
        with pytest.raises(StorageUnavailable):
            await route(services, first)
    finally:
        await elsewhere.storage.close()

    assert (await route(services, first)).outcome == "look-work-arrived"
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert chain.armed(epoch_ms())
    assert chain.token == looks(services.publisher)[-1][0].token


async def test_new_work_is_looked_at_within_the_floor_even_while_the_chain_looks_far_ahead(services):
    queue = services.settings.work_queue
    container = await services.storage.ensure_container(services.settings.state_container)
    far = lookout.Chain(token="0" * 32, look_at_ms=epoch_ms() + 30 * 60 * 1000, interval_ms=30 * 60 * 1000)
    await write_json(container, layout.look_blob(queue), far.to_json())

    await submit_one(services)
    await submit_one(services)

    [(armed, ahead_s)] = looks(services.publisher)
    assert 0 < ahead_s <= FLOOR_MS / 1000, "brought back to the floor, once"
    chain, _ = await lookout.read(services, queue)
    assert (chain.token, chain.interval_ms) == (armed.token, FLOOR_MS)


@pytest.mark.slow
async def test_with_service_bus_down_the_look_is_armed_with_the_doorbell_once_it_answers(services):
    services.publisher.down = True
    done = await submit(
        services, NDJSON, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    assert done.trigger == "deferred"
    services.publisher.down = False

    for _ in range(100):
        if looks(services.publisher) and not services.deferred.pending():  # the look is sent before it is cleared
            break
        await asyncio.sleep(0.1)

    assert others(services.publisher) == ["submitted"]
    assert len(looks(services.publisher)) == 1
    assert services.deferred.pending() == []


async def test_a_look_lost_beyond_the_grace_is_replaced_by_the_next_submit(services):
    queue = services.settings.work_queue
    container = await services.storage.ensure_container(services.settings.state_container)
    long_ago = epoch_ms() - lookout.GRACE_MS - 1
    lost = lookout.Chain(token="0" * 32, look_at_ms=long_ago, interval_ms=FLOOR_MS)
    await write_json(container, layout.look_blob(queue), lost.to_json())

    await submit_one(services)

    [(armed, _)] = looks(services.publisher)
    assert armed.token != lost.token
    stale = TriggerEvent(services.settings.account_name, queue, Reason.LOOK, token=lost.token)
    assert (await route(services, stale)).outcome == "look-superseded"


async def test_the_timer_arms_a_chain_for_work_it_finds_unwatched(services):
    batch_id = await submit_one(services)
    container = await services.storage.ensure_container(services.settings.state_container)
    await container.delete_blob(layout.look_blob(services.settings.work_queue))  # the chain is lost
    services.publisher.events.clear()

    outcomes = await fallback.poll(services)

    assert [o.action for o in outcomes] == ["triggered"]
    assert others(services.publisher) == ["fallback"]
    assert len(looks(services.publisher)) == 1
    await drain_all(services, reason=Reason.FALLBACK)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_queue_status_shows_whether_a_look_is_armed(services):
    before = (await read_queue_status(services))["partitions"][0]["look_chain"]
    await submit_one(services)
    after = (await read_queue_status(services))["partitions"][0]["look_chain"]

    assert before == {"armed": False, "next_look_in_ms": None}
    assert after["armed"] is True
    assert 0 < after["next_look_in_ms"] <= FLOOR_MS


async def test_a_look_event_without_its_token_is_malformed(services):
    from shared.core.errors import MalformedEvent

    bare = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.LOOK)
    with pytest.raises(MalformedEvent, match="token"):
        await route(services, bare)
    assert TriggerEvent.decode(TriggerEvent(bare.account, bare.queue, Reason.LOOK, token="a" * 32).encode()).token
