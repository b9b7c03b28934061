"""A submit that cannot store its batch (issue 12, defects 2 and 3), on the real Azurite.

Storage failing is injected at the queue client's send: after some chunks went in, the SDK call raises the
service's own 503 (`HttpResponseError`), which the app's boundary translates as it would a real one. A slow
storage is the same call delayed.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient

from shared import api
from shared.engine.drainer import Drainer
from shared.ops.reports import read_batch_status
from tests.app.conftest import RecordingPublisher, queue_depth

ITEMS = [{"id": f"s-{i}", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"} for i in range(200)]
BODY = "\n".join(json.dumps(i) for i in ITEMS).encode()
HEADERS = {"content-type": "application/x-ndjson", "idempotency-key": "failing-submit"}


def sends_then(
    monkeypatch: Any, *, ok: int, then: str, delay_s: float = 0.0, started: asyncio.Event | None = None
) -> list[int]:
    """The queue client's send: the first `ok` calls go through; then each fails (503) or is slow. `started`,
    if given, is set at the first send.

    A 503 comes only once the first `ok` sends were answered: the submit cancels its other sends at the first
    failure, and a 503 raised at once would cancel the `ok` ones too, before their requests reached storage."""
    real = QueueClient.send_message
    count = [0]
    stored = asyncio.Event()
    answered = [0]
    if ok == 0:
        stored.set()

    async def send_message(client: QueueClient, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if started is not None:
            started.set()
        if count[0] > ok:
            if then == "503":
                await stored.wait()
                error = HttpResponseError(message="Server Busy")
                error.status_code = 503
                raise error
            await asyncio.sleep(delay_s)
            return await real(client, *args, **kwargs)
        reply = await real(client, *args, **kwargs)
        answered[0] += 1
        if answered[0] == ok:
            stored.set()
        return reply

    monkeypatch.setattr(QueueClient, "send_message", send_message)
    return count


async def test_storage_failing_under_a_submit_answers_503_and_the_batch_is_never_shown_accepted(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    sends_then(monkeypatch, ok=5, then="503")

    reply = await api.submit_batch(BODY, HEADERS)

    assert reply.status == 503, reply.body
    assert reply.headers["Retry-After"].isdigit()
    assert reply.body["error"]["code"] == "submit_not_stored"
    batch_id = reply.body["error"]["batch_id"]
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "abandoned", "never 'accepted': it got no 202"
    monkeypatch.undo()  # storage is back
    work = services.storage.queue(services.settings.work_queue)
    assert await queue_depth(work) == 5, "the chunks stored before the failure stay until a drain meets them"

    report = await Drainer(services, services.settings.work_queue).run()

    assert await queue_depth(work) == 0, "discarded at the first drain that met them, not after STAGING_TTL_S"
    assert report.items_ok == 0
    assert report.chunks_done == 0


async def test_a_submit_past_its_deadline_answers_503_in_time_and_nothing_of_it_counts(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="1", SUBMIT_DEADLINE_S="1")
    sends_then(monkeypatch, ok=0, then="slow", delay_s=0.5)  # 200 chunks, 32 at a time: about 3 s

    started = time.monotonic()
    reply = await api.submit_batch(BODY, {"content-type": "application/x-ndjson"})
    answered_s = time.monotonic() - started

    assert reply.status == 503, reply.body
    assert "SUBMIT_DEADLINE_S" in reply.body["error"]["message"]
    assert answered_s < 2.5, "answered at the deadline, not when every send was done"
    status = await read_batch_status(services, reply.body["error"]["batch_id"])
    assert status["status"] == "abandoned"


async def ticking(stop: asyncio.Event, gaps: list[float], ran: list[float] | None = None) -> None:
    """Measures how long the event loop goes without running this task (10 ms sleeps), and in `ran` how much of
    each gap the loop's thread spent running (its CPU time: computing on the loop, not waiting for the machine or
    for another thread's turn with the interpreter lock)."""
    last, cpu = time.monotonic(), time.thread_time()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now, now_cpu = time.monotonic(), time.thread_time()
        gaps.append(now - last - 0.01)
        if ran is not None:
            ran.append(now_cpu - cpu)
        last, cpu = now, now_cpu


def sprinkled(unit: bytes, marked: bytes, count: int = 15_000_000) -> bytes:
    """`count` units, one in about 170 a slightly different one (seeded), so that gzip shrinks them about
    190x: inside the 200x ratio limit, as the attack's body was."""
    import random

    rng, parts, n = random.Random(12), [], 0
    while n < count:
        gap = int(rng.expovariate(0.006))
        parts.append(unit * gap + marked)
        n += gap + 1
    return b"".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ndjson", "json"])
async def test_a_small_gzip_that_inflates_huge_never_stalls_the_event_loop_and_stops_at_the_item_limit(configure, kind):
    """About 250 KB of gzip that inflates to tens of MB of `{}` items, inside the 200x ratio: it used to be
    parsed on the event loop (the choice looked at the compressed size), whole, before MAX_ITEMS was checked:
    seconds of stall and about a gigabyte. The target is 100 ms, held on the loop thread's own running time
    within a gap; the gap's wall time, which also counts a busy machine and the decoding threads' turns with the
    interpreter lock, is bounded at 0.5 s (the reliability drill measures both against a running drain)."""
    import gzip

    from shared.core.errors import LimitExceeded
    from shared.intake.submit import submit

    services = configure(MAX_ITEMS="250000")
    if kind == "ndjson":
        raw, content_type = sprinkled(b"{}\n", b"{} \n"), "application/x-ndjson"
    else:
        raw, content_type = b'{"items":[' + sprinkled(b"{},", b"{} ,") + b"{}]}", "application/json"
    body = gzip.compress(raw, 6)
    assert len(raw) > 40 * 2**20
    assert len(body) < 300_000
    assert len(raw) < 200 * len(body), "inside MAX_GZIP_RATIO"
    del raw
    stop, gaps, ran = asyncio.Event(), [], []
    ticker = asyncio.create_task(ticking(stop, gaps, ran))
    started = time.monotonic()
    try:
        with pytest.raises(LimitExceeded) as refused:
            await submit(services, body, content_type=content_type, content_encoding="gzip", idempotency_key=None)
    finally:
        stop.set()
        await ticker
    assert refused.value.details["limit"] == "MAX_ITEMS"
    stall = max(gaps, default=time.monotonic() - started)  # no tick at all: stalled the whole time
    computing = max(ran, default=stall)
    assert computing < 0.1, f"the submit computed on the event loop for {computing:.2f} s at a stretch"
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s"
    assert time.monotonic() - started < 20


@pytest.mark.slow
async def test_large_submits_beyond_max_large_submits_get_a_503_with_retry_after(configure, monkeypatch):
    configure(publisher=RecordingPublisher(), MAX_LARGE_SUBMITS="1", CHUNK_MAX_ITEMS="100")
    storing = asyncio.Event()
    sends_then(monkeypatch, ok=0, then="slow", delay_s=0.3, started=storing)
    big = "\n".join(json.dumps({**ITEMS[0], "id": f"b-{i}", "pad": "x" * 900}) for i in range(10_000)).encode()
    assert len(big) > 8 * 2**20

    first = asyncio.create_task(api.submit_batch(big, {"content-type": "application/x-ndjson"}))
    await asyncio.wait_for(storing.wait(), 60)  # the first is storing (its sends are slow), however slow its decoding
    second = await api.submit_batch(big, {"content-type": "application/x-ndjson"})
    small = await api.submit_batch(BODY, {"content-type": "application/x-ndjson"})
    answered = await first

    assert second.status == 503, second.body
    assert second.body["error"]["code"] == "busy"
    assert second.headers["Retry-After"].isdigit()
    assert answered.status == 202, answered.body
    assert small.status == 202, "small submits are not held back"


async def test_a_keyed_retry_of_a_batch_committed_but_never_announced_rings_its_doorbell(configure, monkeypatch):
    from shared.intake import submit as intake

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    headers = {**HEADERS, "idempotency-key": "died-between-commit-and-doorbell"}

    async def died(*args: Any, **kwargs: Any) -> str:
        raise SystemExit("the process died after the commit, before its doorbell")

    monkeypatch.setattr(intake, "ring", died)
    with pytest.raises(SystemExit):
        await api.submit_batch(BODY, headers)
    monkeypatch.undo()
    assert publisher.events == [], "the first submit rang nothing"

    reply = await api.submit_batch(BODY, headers)  # the client retries with its key

    assert reply.status == 202, reply.body
    assert reply.headers["Idempotent-Replayed"] == "true"
    assert publisher.reasons() == ["submitted", "look"], "the retry rings the doorbell and arms the look"
    assert reply.body["trigger"] == "published"
    report = await Drainer(services, services.settings.work_queue).run()
    assert report.items_ok == reply.body["items"]
