"""The client's retries, idempotency keys, typed errors and partial exports, against scripted answers
(httpx.MockTransport): the answers a cold front end or a loaded app gives (bare 429/502/503, Retry-After) cannot be
had from the local host on demand. Beside the real-stack tests in test_client.py. The client's waits are recorded,
not slept."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from queue_drain_client import AsyncClient, Client, ConnectionFailed, NotFinal, RetryableError, __version__
from queue_drain_client._retry import backoff_s, retry_after_s
from queue_drain_client.errors import (
    BatchConflict,
    Busy,
    IdempotencyConflict,
    MalformedRequest,
    QuotaExceeded,
    RateLimited,
    ServerError,
    SubmitNotStored,
)

ROOT = Path(__file__).resolve().parents[2]
BATCH = "a" * 32
Answer = Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str, headers: dict[str, str] | None = None, **details: Any) -> httpx.Response:
    body = {"error": {"code": code, "message": f"{code} here", **details}}
    return httpx.Response(status, json=body, headers=headers)


def status_doc(state: str, done: int = 0, total: int = 4) -> dict[str, Any]:
    items = {"total": total, "succeeded": done, "failed": 0, "pending": total - done}
    chunks = {"total": 1, "done": int(done == total), "poisoned": 0, "pending": int(done < total)}
    return {"batch_id": BATCH, "status": state, "items": items, "chunks": chunks, "created_at": "2026-01-01T00:00:00Z"}


def accepted(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        202,
        json={
            "batch_id": BATCH,
            "items": 2,
            "chunks": 1,
            "status_url": f"/api/batches/{BATCH}",
            "trigger": "published",
        },
    )


class Script:
    """Answers in turn (the last one repeats), every request kept."""

    def __init__(self, *answers: httpx.Response | Answer | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


class Recorded(Client):
    """A Client whose back-off waits are recorded instead of slept."""

    def __init__(self, script: Script, **options: Any) -> None:
        super().__init__("http://app.test", transport=httpx.MockTransport(script), **options)
        self.slept: list[float] = []

    def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def client_for() -> Iterator[Callable[..., Recorded]]:
    made: list[Recorded] = []

    def make(*answers: httpx.Response | Answer | Exception, **options: Any) -> Recorded:
        made.append(Recorded(Script(*answers), **options))
        return made[-1]

    yield make
    for client in made:
        client.close()


def requests_of(client: Recorded) -> list[httpx.Request]:
    return client._http._transport.handler.requests  # type: ignore[attr-defined]


def test_a_429_and_a_503_are_retried_after_the_retry_after_they_name(client_for: Callable[..., Recorded]) -> None:
    client = client_for(
        httpx.Response(429, headers={"Retry-After": "3"}),
        error(503, "busy", {"Retry-After": "5"}),
        httpx.Response(200, json=status_doc("completed", 4)),
    )
    assert client.status(BATCH)["status"] == "completed"
    assert client.slept == [3.0, 5.0]
    assert len(requests_of(client)) == 3


def test_retries_stop_at_max_retries_and_raise_the_last_answer_with_its_response(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(error(503, "busy", {"Retry-After": "2"}))
    with pytest.raises(Busy) as raised:
        client.status(BATCH)
    assert isinstance(raised.value, RetryableError)
    assert raised.value.retry_after == 2.0
    assert raised.value.response is not None
    assert raised.value.response.status_code == 503
    assert len(requests_of(client)) == 3, "the first attempt and two retries (max_retries=2 by default)"
    once = client_for(error(503, "busy"), max_retries=0)
    with pytest.raises(Busy):
        once.status(BATCH)
    assert len(requests_of(once)) == 1
    per_call = client_for(error(503, "busy"))
    with pytest.raises(Busy):
        per_call.with_options(max_retries=5).status(BATCH)
    assert len(requests_of(per_call)) == 6
    assert per_call.options.max_retries == 2, "with_options leaves the client as it was"


def test_a_bare_gateway_answer_is_retried_with_a_jittered_doubling_back_off(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(httpx.Response(502), httpx.Response(504), httpx.Response(200, json=status_doc("completed", 4)))
    client.status(BATCH)
    first, second = client.slept
    assert 0.375 <= first <= 0.5
    assert 0.75 <= second <= 1.0
    bare = client_for(httpx.Response(503))
    with pytest.raises(ServerError):
        bare.status(BATCH)
    limited = client_for(httpx.Response(429))
    with pytest.raises(RateLimited):
        limited.status(BATCH)


def test_a_400_is_not_retried(client_for: Callable[..., Recorded]) -> None:
    client = client_for(error(400, "malformed_request", field="callback_url"))
    with pytest.raises(MalformedRequest) as raised:
        client.submit([{"id": "s-1"}])
    assert raised.value.details["field"] == "callback_url"
    assert not isinstance(raised.value, RetryableError)
    assert len(requests_of(client)) == 1
    assert client.slept == []


def test_submit_sends_its_own_idempotency_key_and_the_same_one_on_each_retry(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(
        error(503, "submit_not_stored", {"Retry-After": "1"}),
        httpx.ReadTimeout("the answer was lost"),
        accepted,
    )
    batch = client.submit([{"id": "s-1"}, {"id": "s-2"}])
    keys = [r.headers["idempotency-key"] for r in requests_of(client)]
    assert len(keys) == 3
    assert len(set(keys)) == 1, "one key across the retries: the app answers the first batch, stores no second"
    assert re.fullmatch(r"qd-[0-9a-f]{32}", keys[0])
    assert batch.idempotency_key == keys[0]
    assert batch.batch_id == BATCH
    other = client_for(accepted)
    other.submit([{"id": "s-3"}])
    other.submit([{"id": "s-3"}], idempotency_key="mine-1")
    first, given_key = (r.headers["idempotency-key"] for r in requests_of(other))
    assert first != keys[0], "each submit its own key"
    assert given_key == "mine-1", "the caller's key as given"


def test_a_submit_runs_out_of_retries_as_submit_not_stored(client_for: Callable[..., Recorded]) -> None:
    client = client_for(error(503, "submit_not_stored", {"Retry-After": "10"}))
    with pytest.raises(SubmitNotStored) as raised:
        client.submit([{"id": "s-1"}])
    assert raised.value.retry_after == 10.0
    assert client.slept == [10.0, 10.0]


def test_a_409_is_retried_only_while_the_same_key_is_in_flight(client_for: Callable[..., Recorded]) -> None:
    in_flight = client_for(error(409, "idempotency_conflict"), accepted)
    assert in_flight.submit([{"id": "s-1"}]).batch_id == BATCH
    assert len(requests_of(in_flight)) == 2
    reused = client_for(error(409, "idempotency_conflict", different=["body"]))
    with pytest.raises(IdempotencyConflict) as raised:
        reused.submit([{"id": "s-1"}], idempotency_key="k")
    assert raised.value.details["different"] == ["body"]
    assert len(requests_of(reused)) == 1
    conflict = client_for(error(409, "batch_conflict"))
    with pytest.raises(BatchConflict):
        conflict.cancel(BATCH)
    assert len(requests_of(conflict)) == 1


def test_connection_errors_are_retried_then_raised_as_connection_failed(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(httpx.ConnectError("refused"), httpx.Response(200, json=status_doc("completed", 4)))
    assert client.status(BATCH)["status"] == "completed"
    down = client_for(httpx.ConnectError("refused"))
    with pytest.raises(ConnectionFailed):
        down.status(BATCH)
    assert len(requests_of(down)) == 3


def test_a_replay_is_not_repeated_after_an_attempt_that_may_have_moved_chunks(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(error(503, "storage_unavailable"))
    with pytest.raises(ServerError):
        client.replay(batch_id=BATCH)
    assert len(requests_of(client)) == 1
    refused = client_for(httpx.ConnectError("refused"), httpx.Response(200, json={"replayed": 0}))
    assert refused.replay(all=True)["replayed"] == 0, "a connection never made did nothing: retried"
    assert json.loads(requests_of(refused)[0].content) == {"all": True}
    with pytest.raises(ValueError, match="name a batch_id"):
        refused.replay()


def test_a_quota_429_is_its_own_class_and_carries_the_limit(client_for: Callable[..., Recorded]) -> None:
    client = client_for(error(429, "quota_exceeded", {"Retry-After": "7"}, limit="TENANT_MAX_PENDING_ITEMS"))
    with pytest.raises(QuotaExceeded) as raised:
        client.submit([{"id": "s-1"}])
    assert isinstance(raised.value, RateLimited)
    assert raised.value.details["limit"] == "TENANT_MAX_PENDING_ITEMS"
    assert client.slept == [7.0, 7.0]


def page(state: str, lines: list[dict[str, Any]], continuation: str | None = None) -> httpx.Response:
    headers = {"X-Batch-Status": state, "Content-Type": "application/x-ndjson"}
    if continuation is not None:
        headers["X-Continuation"] = continuation
    return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines).encode(), headers=headers)


def routed(statuses: list[str], pages: dict[str | None, httpx.Response]) -> Answer:
    """A status route answering `statuses` in turn (the last repeats), and a results route answering by
    continuation."""
    read = iter(statuses)
    last = [statuses[0]]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/results"):
            return pages[request.url.params.get("continuation")]
        last[0] = next(read, last[0])
        return httpx.Response(200, json=status_doc(last[0], 4 if last[0] == "completed" else 1))

    return answer


def test_a_running_batchs_partial_export_is_refused_not_passed_off_as_the_whole(
    client_for: Callable[..., Recorded],
) -> None:
    client = client_for(routed(["processing"], {None: page("processing", [{"position": 0, "status": "succeeded"}])}))
    with pytest.raises(NotFinal) as raised:
        list(client.results(BATCH, wait=False))
    assert raised.value.batch_status == "processing"
    pages = list(client.result_pages(BATCH))
    assert [(p.final, p.batch_status, len(p.lines)) for p in pages] == [(False, "processing", 1)]


def test_results_wait_for_the_batch_to_be_final_and_follow_every_page(client_for: Callable[..., Recorded]) -> None:
    lines = [{"position": n, "status": "succeeded"} for n in range(4)]
    pages = {None: page("completed", lines[:3], continuation="3"), "3": page("completed", lines[3:])}
    client = client_for(routed(["processing", "processing", "completed"], pages))
    assert list(client.results(BATCH)) == lines
    assert client.slept == [0.5, 1.0], "two status reads before final, backing off"


def test_wait_backs_off_from_half_a_second_doubling_to_fifteen(client_for: Callable[..., Recorded]) -> None:
    client = client_for(routed(["processing"] * 8 + ["completed"], {}))
    assert client.wait(BATCH)["status"] == "completed"
    assert client.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]


async def test_the_async_client_retries_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script(
        error(503, "busy", {"Retry-After": "4"}), httpx.ConnectError("refused"), accepted, httpx.Response(202)
    )
    slept: list[float] = []

    async def record(self: AsyncClient, seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(AsyncClient, "_sleep", record)
    async with AsyncClient("http://app.test", transport=httpx.MockTransport(script)) as qd:
        batch = await qd.submit([{"id": "s-1"}])
    assert batch.batch_id == BATCH
    assert slept[0] == 4.0
    assert len({r.headers["idempotency-key"] for r in script.requests}) == 1
    assert len(script.requests) == 3


def test_the_async_client_has_every_call_the_sync_one_has_with_the_same_arguments() -> None:
    public = {name for name in dir(Client) if not name.startswith("_")} - {"close"}
    assert public <= set(dir(AsyncClient))
    for name in public:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name


def test_the_version_is_the_packages() -> None:
    pyproject = (ROOT / "client" / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject


def test_retry_after_reads_seconds_milliseconds_and_an_http_date() -> None:
    assert retry_after_s({"retry-after": "12"}) == 12.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = datetime(2026, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_s({"retry-after": date}, now_s=now.timestamp()) == 30.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


@given(st.integers(min_value=0, max_value=50), st.floats(min_value=0, max_value=1))
def test_the_back_off_doubles_from_half_a_second_to_eight_less_at_most_a_quarter(retry: int, jitter: float) -> None:
    full = min(0.5 * 2**retry, 8.0)
    assert 0.75 * full <= backoff_s(retry, jitter) <= full
