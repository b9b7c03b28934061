"""A retry's update of its message applied by storage with its answer lost: the SDK's retry meets the new pop
receipt and is refused as if someone else held the message, yet nobody does. The drainer still leaves a wake-up
for when the message reappears, or it would wait for the timer's next tick (the simulation's storage seed 168:
570 s past the look bound)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.ops.reports import read_batch_status
from tests.app.conftest import drain_all, drain_once_due, retrying_once, the_retry_due
from tests.app.sales import submit_ids
from tests.app.test_replay_job_start import answer_lost_once


@pytest.mark.slow
async def test_a_retry_whose_update_lost_its_answer_still_leaves_a_wake_up(configure: Any, monkeypatch: Any) -> None:
    services, publisher = retrying_once(configure, 1000)
    batch_id = await submit_ids(services, ["trans-1", "ok-1"])
    lost = answer_lost_once(monkeypatch, "PUT", "/messages/")  # update_message: the retry's rewrite

    await drain_all(services)

    assert lost, "the retry's update lost its answer"
    await drain_once_due(services, the_retry_due(publisher))
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
