"""A completion notice's attempts (issue 36 items 10 and 17): never two at once, none past the notice's deadline,
and longer waits after an attempt the receiver did not answer in time. The app's real notice code on real Azurite
with a real receiver (tests/receiver.py); a kill during an attempt is its task cancelled mid-POST (nothing after
that point runs); the Service Bus events are recorded (the real broker carries them in tests/faults)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from shared.core.events import Reason
from shared.ops import lifecycle, notice_sweep, notices
from shared.services import Services
from shared.store.storage import write_json
from tests.app.conftest import RecordingPublisher, drain_all, http_request, wait_for, with_settings
from tests.receiver import Receiver, new_secret, receiving

SECRET = new_secret()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(SECRET, statuses=[503], hold=True) as found:  # answers only once released: a slow receiver
        yield found


async def final_batch(configure: Any, app_functions: Any, receiver: Receiver, **settings: str) -> tuple[Services, str]:
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:record",
        CALLBACK_ALLOWED_HOSTS=f"http://127.0.0.1:{receiver.port}",
        CALLBACK_ALLOW_HTTP_LOOPBACK="true",
        CALLBACK_SECRET=SECRET,
        **settings,
    )
    body = "\n".join(json.dumps({"id": f"a-{n}"}) for n in range(3)).encode()
    headers = {"Content-Type": "application/x-ndjson", "X-Callback-Url": receiver.url("/done")}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=headers))
    assert response.status_code == 202, response.get_body()
    await drain_all(services)
    return services, json.loads(response.get_body())["batch_id"]


async def store_notice(services: Services, batch_id: str) -> None:
    assert await lifecycle.finalize(services, batch_id) is not None, "the batch is final: its notice is stored"


@pytest.mark.slow
async def test_a_retry_due_while_the_previous_attempt_still_waits_for_its_answer_does_not_start(
    configure, app_functions, receiver
):
    # A retry base (1 s) below the timeout (3 s): the claim used to hold only the retry delay, so the next
    # attempt's event came while the first POST still waited, and a second POST went out beside it.
    services, batch_id = await final_batch(
        configure, app_functions, receiver,
        CALLBACK_TIMEOUT_S="3", CALLBACK_RETRY_BASE_S="1", CALLBACK_RETRY_MAX_S="1",
    )  # fmt: skip
    await store_notice(services, batch_id)
    first = asyncio.create_task(notices.step(services, batch_id))
    await wait_for(lambda: asyncio.sleep(0, receiver.count() == 1), 30, "the first attempt's POST")
    posted = time.time()
    claimed, _ = await notices.read(services, batch_id)
    # The next attempt's event comes at the claim's due time: deliver it then, if that is while the POST may run.
    await asyncio.sleep(max(0.0, min(claimed.next_due_s or 0.0, posted + 3) - time.time()))
    second = await notices.step(services, batch_id)
    receiver.release.set()
    assert await first == "notice-retrying"
    assert second == "notice-not-due", "no attempt while the one before may still be sending"
    assert receiver.most_in_flight == 1
    assert receiver.count() == 1
    assert claimed.next_due_s is not None
    assert claimed.next_due_s >= posted + services.settings.callback_timeout_s, "the claim outlasts the POST"


@pytest.mark.slow
async def test_a_last_attempt_killed_mid_post_comes_back_after_the_deadline_and_gives_up_without_a_post(
    configure, app_functions, receiver, monkeypatch
):
    services, batch_id = await final_batch(configure, app_functions, receiver, CALLBACK_TIMEOUT_S="1")
    # A 5 s window and the default 30 s retry base: the first attempt is the last; its claim holds ~7 s.
    monkeypatch.setattr(notices, "CLAIM_MARGIN_S", 6.0)
    services = with_settings(services, callback_window_s=5, publish_timeout_s=0.1)
    await store_notice(services, batch_id)
    stored, _ = await notices.read(services, batch_id)
    attempt = asyncio.create_task(notices.step(services, batch_id))
    await wait_for(lambda: asyncio.sleep(0, receiver.count() == 1), 30, "the last attempt's POST")
    attempt.cancel()  # the host dies during the POST: its outcome is never written
    with pytest.raises(asyncio.CancelledError):
        await attempt
    claimed, _ = await notices.read(services, batch_id)
    assert claimed.next_due_s is not None
    assert claimed.next_due_s > stored.deadline_s, "its event comes back past the deadline"
    await asyncio.sleep(max(0.0, claimed.next_due_s - time.time()))  # that event's due time
    outcome = await notices.step(services, batch_id)
    after, _ = await notices.read(services, batch_id)
    assert outcome == "notice-failed"
    assert receiver.count() == 1, "no attempt starts past the deadline"
    assert (after.state, after.attempts) == ("failed", 1)


async def test_an_attempt_the_receiver_did_not_answer_in_time_waits_four_times_longer_before_the_next(
    configure, app_functions, receiver
):
    # The default retry base (30 s): after an answered failure the next attempt comes 15-30 s later; after a
    # timeout, 60-120 s later (two doublings more), and its event is published for that time.
    services, batch_id = await final_batch(configure, app_functions, receiver, CALLBACK_TIMEOUT_S="1")
    await store_notice(services, batch_id)
    started = time.time()
    assert await notices.step(services, batch_id) == "notice-retrying"
    after, _ = await notices.read(services, batch_id)
    assert receiver.count() == 1
    assert (after.state, after.last_error, after.timeouts) == ("pending", "timeout", 1)
    assert after.next_due_s is not None
    assert after.next_due_s >= started + 60, "two doublings more than the 15-30 s after an answered failure"
    scheduled = [at for e, at in services.publisher.events if e.reason is Reason.NOTIFY and at is not None]
    assert scheduled, "the next attempt's event"
    assert max(at.timestamp() for at in scheduled) == pytest.approx(after.next_due_s, abs=0.01)
    view = after.view()
    assert (view["last_status"], view["last_error"]) == (None, "timeout")


async def test_a_notice_whose_events_were_lost_for_its_whole_window_still_gets_one_post(configure, app_functions):
    # Lifecycle seed 58 of the simulation: every Service Bus event of a notice lost (its first attempt's, and the
    # sweeps' republished ones) until its window had passed; the event that finally came gave it up unsent.
    with receiving(SECRET) as answering:
        services, batch_id = await final_batch(configure, app_functions, answering)
        services.publisher.down = True  # the first attempt's event is never published
        await store_notice(services, batch_id)
        services.publisher.down = False
        state = services.storage.container(services.settings.state_container)
        stored, etag = await notices.read(services, batch_id)
        window_ago = time.time() - services.settings.callback_window_s - notices.STALL_S - 1
        past = replace(stored, created_s=window_ago, deadline_s=window_ago + 1, next_due_s=window_ago)
        await write_json(state, notices.notice_blob(batch_id), past.to_json(), etag=etag, metadata=past.metadata())

        published, _ = await notice_sweep.sweep(services)
        assert published == 1, "the timer's sweep publishes the overdue notice's attempt"
        outcome = await notices.step(services, batch_id)  # that event, delivered

        after, _ = await notices.read(services, batch_id)
        assert answering.count() == 1, "one POST, though its window has passed"
        assert (outcome, after.state, after.attempts) == ("notice-delivered", "delivered", 1)
