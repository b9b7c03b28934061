"""A look chain's write that answers only once its look is due, on the real Azurite.

The chain sends its look and then names it in its blob. When storage is slow (or failing, the SDK retrying), the
look can come before its name is written and is ignored as a leftover; the blob then names a look that came and
went, and reads armed until GRACE_MS past due, so the next submit arms nothing: the simulation's storage seed 889
had a write take 16 s against a 5 s floor, and a queue holding a 202'd batch unlooked-at until the timer's tick
(6 hours as shipped). The write is held here until the look is due (the one fault; the rest is the real stack).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from azure.storage.blob.aio import BlobClient

from shared.core import layout
from shared.router import route
from shared.store.received import epoch_ms
from shared.watch import lookout
from tests.app.conftest import RecordingPublisher
from tests.app.test_lookout import looks, submit_one
from tests.app.test_lost_look_answer import assert_armed_by_a_live_look


@pytest.mark.slow
async def test_a_look_that_came_before_its_slow_write_named_it_is_followed_by_another(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="2000", BACKOFF_JITTER="0")
    queue = services.settings.work_queue
    writing, answer = asyncio.Event(), asyncio.Event()
    upload = BlobClient.upload_blob

    async def slow_first_write(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.blob_name == layout.look_blob(queue) and not writing.is_set():
            writing.set()
            await answer.wait()  # storage takes this long (its SDK retrying an outage)
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", slow_first_write)
    submitting = asyncio.create_task(submit_one(services))
    await writing.wait()
    [(first, ahead_s)] = looks(services.publisher)  # sent before the write that names it
    await asyncio.sleep(ahead_s)  # the look's due time: Service Bus delivers it
    assert (await route(services, first)).outcome == "look-superseded", "come before its name: taken for a leftover"
    answer.set()
    await submitting

    chain, _ = await lookout.read(services, queue)
    assert chain.token != first.token, "the blob names the look that came and went: nothing looks at the queue"
    await assert_armed_by_a_live_look(services)
    named = next(e for e, _ in looks(services.publisher) if e.token == chain.token)
    assert chain.look_at_ms is not None
    assert chain.look_at_ms > epoch_ms(), "named before it is due"
    assert (await route(services, named)).outcome == "look-triggered", "the queue holding the batch is looked at"
