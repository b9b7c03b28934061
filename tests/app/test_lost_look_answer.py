"""A look chain's own write applied by storage with its answer lost: the SDK's retry meets the new ETag (412, or
409 for a first write) as if another writer had got there first. The chain must still be armed by the look it
wrote, not withdrawn (the simulation's storage seed 168: the blob named a look that was cancelled, and a queue
holding a message was not looked at until the timer's tick, 570 s past the look bound); and a look that ended the
chain goes on to its second depth read."""

from __future__ import annotations

from typing import Any

import pytest

from shared.router import route
from shared.store.received import epoch_ms
from shared.watch import lookout
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.test_lookout import looks, submit_one
from tests.app.test_replay_job_start import answer_lost_once

# Each waits seconds (the storage SDK's retry back-off, the look's floor): `make test`, not test-fast.
pytestmark = pytest.mark.slow


async def assert_armed_by_a_live_look(services: Any) -> None:
    """The chain's blob names a look that was sent and not withdrawn."""
    publisher: RecordingPublisher = services.publisher
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert chain.armed(epoch_ms()), chain
    sequences = [n for n, e in publisher.scheduled.items() if e.token == chain.token]
    assert sequences, "the blob names a look that was sent"
    assert not set(sequences) & set(publisher.cancelled), "the look the blob names was withdrawn: the chain is dead"


async def test_a_first_arm_whose_write_lost_its_answer_keeps_its_look(configure: Any, monkeypatch: Any) -> None:
    services = configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="10000", BACKOFF_JITTER="0")
    lost = answer_lost_once(monkeypatch, "PUT", "/looks/")

    await submit_one(services)

    assert lost, "the chain's first write lost its answer"
    await assert_armed_by_a_live_look(services)


async def test_a_look_whose_successor_write_lost_its_answer_keeps_the_chain_armed(
    configure: Any, monkeypatch: Any
) -> None:
    services = configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="10000", BACKOFF_JITTER="0")
    await submit_one(services)  # a message nobody drains: the look finds it
    [(first, _)] = looks(services.publisher)
    lost = answer_lost_once(monkeypatch, "PUT", "/looks/")

    await route(services, first)

    assert lost, "the successor's write lost its answer"
    assert len(looks(services.publisher)) == 2
    await assert_armed_by_a_live_look(services)


async def test_a_look_whose_ending_write_lost_its_answer_still_ends_the_chain(configure: Any, monkeypatch: Any) -> None:
    services = configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="10000", BACKOFF_JITTER="0")
    await submit_one(services)
    await drain_all(services)
    [(first, _)] = looks(services.publisher)
    lost = answer_lost_once(monkeypatch, "PUT", "/looks/")

    report = await route(services, first)

    assert lost, "the ending write lost its answer"
    assert report.outcome == "look-idle", "its own write taken for another's: the second depth read skipped"
    chain, _ = await lookout.read(services, services.settings.work_queue)
    assert not chain.armed(epoch_ms())
    assert chain.ended_by == first.token
