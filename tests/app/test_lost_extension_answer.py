"""A held message's extension (`shared.engine.visibility`) applied by storage with its answer lost: the SDK's
retry meets the new pop receipt and is refused, the work is cancelled and the message left for redelivery. It is
hidden for a whole visibility timeout from the extension, so its wake-up must not come at the visibility the
extension replaced: that one finds nothing, the session ends cleanly and withdraws its watchdog, and the message
waits for the look chain or the timer."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from shared.core.events import Reason
from shared.engine.visibility import EXTEND_AT
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.sales import submit_ids
from tests.app.test_replay_job_start import answer_lost_once

VISIBILITY_S = 10  # the wake-up's margin (3 s) must be below what an extension adds (40% of it)


@pytest.mark.slow
async def test_a_message_whose_extension_lost_its_answer_is_woken_for_when_it_reappears(
    configure: Any, monkeypatch: Any
) -> None:
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:blocking", VISIBILITY_TIMEOUT_S=str(VISIBILITY_S)
    )
    batch_id = await submit_ids(services, ["x-1"])
    lost = answer_lost_once(monkeypatch, "PUT", "/messages/")  # the extension: an ok chunk is deleted, not updated
    started = time.time()

    await drain_all(services)  # the handler waits until the failed extension cancels it

    assert lost, "the extension lost its answer"
    assert handlers.cancelled, "the failed extension cancelled the work"
    due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
    assert len(due) == 1, publisher.events
    extended_at = started + VISIBILITY_S * EXTEND_AT  # no earlier: the message was received after `started`
    assert due[0].timestamp() >= extended_at + VISIBILITY_S, "woken before the extended message reappears"
    handlers.release.set()
    await asyncio.sleep(max(0.0, (due[0] - datetime.now(timezone.utc)).total_seconds()))
    await drain_all(services)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
