"""The client package (`queue_drain_client`, client/) against the local host of the real app, sync and async:
submit, status, wait, idempotent replays, a notice's callback, one exception per error code; `results()` and
`cancel()` use the lifecycle routes."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from queue_drain_client import AsyncClient, Client, ConnectionFailed, WaitTimeout
from queue_drain_client.errors import LimitExceeded, MalformedRequest, NotFound, UnsupportedMediaType

from tests.faults.stack import Stack, started
from tests.receiver import new_secret, quiet_port, receiving

SECRET = new_secret()
PORT = quiet_port()  # the receiver's: the callback allow list names origins (scheme, host, port)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = {
        "CALLBACK_ALLOWED_HOSTS": f"http://127.0.0.1:{PORT}",
        "CALLBACK_ALLOW_HTTP_LOOPBACK": "true",
        "CALLBACK_SECRET": SECRET,
        "FAULT_CHUNK_DELAY_S": "0.5",  # a chunk takes this long: a large batch is still running when cancelled
        "CHUNK_MAX_ITEMS": "100",
        "CHUNK_CONCURRENCY": "2",
        "MAX_ITEMS": "20000",
    }
    with started(tmp_path_factory.mktemp("client"), settings) as found:
        yield found


@pytest.fixture
def client(stack: Stack) -> Iterator[Client]:
    with Client(stack.live_host().url) as found:
        yield found


def items(n: int, tag: str = "c") -> list[dict[str, object]]:
    return [{"id": f"{tag}-{i}"} for i in range(n)]


def test_submit_then_wait_gives_the_final_status_with_every_item_counted(client: Client, stack: Stack) -> None:
    batch = client.submit(items(250), tenant="acme", priority="high")
    assert (batch.items, batch.chunks, batch.replayed) == (250, 3, False)
    assert batch.raw["tenant"] == "acme"
    assert batch.raw["priority"] == "high"
    done = client.wait(batch.batch_id, timeout_s=120, every_s=0.2, progress=True)
    assert done["status"] == "completed"
    assert done["items"] == {"total": 250, "succeeded": 250, "failed": 0, "pending": 0}
    assert client.status(batch.batch_id) == done | {"status": "completed"}


def test_a_file_is_submitted_as_it_is_and_an_idempotency_key_answers_the_same_batch(
    client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "batch.ndjson"
    path.write_text("".join(json.dumps(i) + "\n" for i in items(30, "f")))
    key = uuid.uuid4().hex
    first = client.submit(file=path, idempotency_key=key)
    again = client.submit(file=path, idempotency_key=key)
    assert again.batch_id == first.batch_id
    assert again.replayed
    assert not first.replayed
    assert client.wait(first.batch_id, timeout_s=120, every_s=0.2)["items"]["succeeded"] == 30


def test_each_json_error_code_is_its_own_exception_carrying_the_apis_details(client: Client, tmp_path: Path) -> None:
    with pytest.raises(NotFound) as missing:
        client.status("0" * 32)
    assert missing.value.status == 404
    assert missing.value.code == "not_found"
    with pytest.raises(MalformedRequest) as bad:
        client.submit(items(2), callback_url="https://hooks.example.com/x")
    assert bad.value.details["field"] == "callback_url"
    with pytest.raises(LimitExceeded) as big:
        client.submit(items(20001))
    assert big.value.status == 413
    assert "limit" in big.value.details
    odd = tmp_path / "batch.txt"
    odd.write_text("not json")
    with pytest.raises((MalformedRequest, UnsupportedMediaType)):
        client.submit(file=odd)
    with pytest.raises(ValueError, match="either items or a file"):
        client.submit()


def test_an_unreachable_app_and_a_wait_that_runs_out_are_errors_of_their_own(client: Client) -> None:
    with Client("http://127.0.0.1:9", timeout_s=2) as nowhere, pytest.raises(ConnectionFailed):
        nowhere.status("0" * 32)
    batch = client.submit(items(2000, "w"))
    with pytest.raises(WaitTimeout) as late:
        client.wait(batch.batch_id, timeout_s=0.1, every_s=0.05)
    assert late.value.status["batch_id"] == batch.batch_id
    assert late.value.status["status"] not in {"completed"}


def test_a_callback_named_through_the_client_is_delivered_and_shown_in_status(client: Client) -> None:
    with receiving(SECRET, port=PORT) as receiver:
        batch = client.submit(items(5, "cb"), callback_url=receiver.url())
        assert batch.raw["callback_url"] == receiver.url()
        client.wait(batch.batch_id, timeout_s=120, every_s=0.2)
        for _ in range(200):
            status = client.status(batch.batch_id)
            if status["callback"]["state"] == "delivered":
                break
            time.sleep(0.1)
    assert status["callback"]["state"] == "delivered", status["callback"]
    assert receiver.count() == 1
    assert receiver.got[0].verified
    assert receiver.got[0].json()["data"]["items"]["succeeded"] == 5


async def test_the_async_client_submits_waits_and_raises_the_same_errors(stack: Stack) -> None:
    async with AsyncClient(stack.live_host().url) as qd:
        batch = await qd.submit(items(120, "a"), tenant="acme")
        done = await qd.wait(batch.batch_id, timeout_s=120, every_s=0.2)
        assert done["status"] == "completed"
        assert done["items"]["succeeded"] == 120
        assert (await qd.status(batch.batch_id))["batch_id"] == batch.batch_id
        listed = [b["batch_id"] async for b in qd.batches(page=2)]
        assert batch.batch_id in listed
        assert len(listed) == len(set(listed))
        with pytest.raises(NotFound):
            await qd.status("f" * 32)


def test_results_yields_one_outcome_per_item(client: Client) -> None:
    batch = client.submit(items(150, "r"))
    client.wait(batch.batch_id, timeout_s=120, every_s=0.2)
    found = list(client.results(batch.batch_id))
    assert len(found) == 150
    assert {json.dumps(r, sort_keys=True) for r in found}, "each outcome is a JSON value"


async def test_results_and_cancel_through_the_async_client(stack: Stack) -> None:
    async with AsyncClient(stack.live_host().url) as qd:
        done = await qd.submit(items(50, "ar"))
        await qd.wait(done.batch_id, timeout_s=120, every_s=0.2)
        assert len([r async for r in qd.results(done.batch_id)]) == 50
        running = await qd.submit(items(5000, "ac"))
        await qd.cancel(running.batch_id)
        final = await qd.wait(running.batch_id, timeout_s=120, every_s=0.2)
        assert final["status"] == "cancelled"
        assert final["items"]["succeeded"] < 5000


def test_cancel_stops_a_running_batch_which_ends_cancelled(client: Client) -> None:
    batch = client.submit(items(5000, "x"))
    client.cancel(batch.batch_id)
    final = client.wait(batch.batch_id, timeout_s=120, every_s=0.2)
    assert final["status"] == "cancelled"
    assert final["items"]["succeeded"] < 5000, "chunks not yet started were not run"
