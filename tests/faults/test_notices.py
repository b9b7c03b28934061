"""Completion notices on the whole local stack: a notice whose retry falls due while the host is dead (`kill -9`)
is delivered once the host is back, with a signature a Standard Webhooks receiver accepts; a callback URL off the
allow-list (by origin: another port of an allowed host too) or one that would be re-encoded is refused with a
400 naming `callback_url`, and nothing is stored; the URL is POSTed byte for byte as the batch reports it; the
status route shows a failed attempt's status class and a fixed reason, never the receiver's words."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.batch.results import successes
from tests.faults.stack import Stack, call, started, wait_until
from tests.receiver import Received, Receiver, new_secret, quiet_port, receiving

pytestmark = pytest.mark.faults

SECRET = new_secret()
RETRY_S = 6  # the first retry comes 3-6 s after a failed attempt (jittered over the upper half)
PORT = quiet_port()  # the receivers' port: the one origin allowed, with CLOSED (where nothing listens)
CLOSED = quiet_port()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = {
        "CALLBACK_ALLOWED_HOSTS": f"http://127.0.0.1:{PORT}, http://127.0.0.1:{CLOSED}",
        "CALLBACK_ALLOW_HTTP_LOOPBACK": "true",
        "CALLBACK_SECRET": SECRET,
        "CALLBACK_RETRY_BASE_S": str(RETRY_S),
        "CALLBACK_RETRY_MAX_S": str(RETRY_S),
        "CALLBACK_TIMEOUT_S": "3",
    }
    with started(tmp_path_factory.mktemp("notices"), settings) as found:
        yield found


def submit(stack: Stack, items: int, callback_url: str, *also: str, **options: str) -> Any:
    """A submit naming `callback_url` in its query (and each of `also` as one more `callback_url` value)."""
    body = "\n".join(json.dumps({"id": f"n-{n}"}) for n in range(items)).encode()
    pairs = [("callback_url", url) for url in (callback_url, *also)] + list(options.items())
    query = urllib.parse.urlencode(pairs)
    return call(f"{stack.live_host().url}/api/batches?{query}", "POST", body, {"Content-Type": "application/x-ndjson"})


def notice(stack: Stack, batch_id: str) -> dict[str, Any]:
    with stack.blobs() as service:
        blob = service.get_blob_client(stack.state_container, f"notices/{batch_id}.json")
        doc: dict[str, Any] = json.loads(blob.download_blob().readall())
        return doc


def manifests(stack: Stack) -> int:
    with stack.blobs() as service:
        container = service.get_container_client(stack.settings["BATCHES_CONTAINER"])
        return sum(1 for b in container.list_blobs() if b.name.endswith("manifest.json")) if container.exists() else 0


@pytest.mark.timeout(300)
def test_a_notice_due_while_the_host_is_killed_is_delivered_signed_once_it_is_back(stack: Stack) -> None:
    with receiving(SECRET, statuses=[503, 200], port=PORT) as receiver:
        reply = submit(stack, 40, receiver.url("/hook?token=t1"))
        assert reply.status == 202, reply.body
        batch_id = reply.json()["batch_id"]
        assert reply.json()["callback_url"] == receiver.url("/hook?token=t1")
        wait_until(lambda: receiver.count() >= 1, 90, "the first attempt (answered 503)")
        stack.kill_host()
        first = notice(stack, batch_id)
        assert first["attempts"] == 1
        assert first["state"] == "pending"
        # The retry falls due while no host runs; nothing can deliver it.
        time.sleep(max(0.0, first["next_due_s"] - time.time()) + 2)
        assert receiver.count() == 1, "no attempt while the host is dead"
        stack.restart_host()
        wait_until(lambda: receiver.count() >= 2, 90, "the retry once the host is back")
        status = wait_until(lambda: delivered(stack, batch_id), 60, "the status to show the notice delivered")
    attempts = receiver.got
    assert [a.answered for a in attempts[:2]] == [503, 200]
    assert all(a.verified for a in attempts), "every attempt carries a valid Standard Webhooks signature"
    assert attempts[0].headers["webhook-id"] == attempts[1].headers["webhook-id"] == f"msg_{batch_id}"
    assert attempts[1].path == "/hook?token=t1"
    sent = attempts[1].json()
    assert sent["type"] == "batch.completed"
    assert sent["data"]["batch_id"] == batch_id
    assert sent["data"]["items"]["succeeded"] == 40
    assert attempts[0].body == attempts[1].body, "every attempt sends the same body"
    callback = status["callback"]
    assert callback["attempts"] >= 2
    assert callback["last_status"] == "2xx"
    assert callback["delivered_at"]
    assert callback["last_error"] is None


def delivered(stack: Stack, batch_id: str) -> dict[str, Any] | None:
    status = stack.status(batch_id)
    return status if status and status.get("callback", {}).get("state") == "delivered" else None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://hooks.example.com/done", "not one of CALLBACK_ALLOWED_HOSTS"),
        ("http://127.0.0.2:8080/done", "not one of CALLBACK_ALLOWED_HOSTS"),
        ("ftp://127.0.0.1/done", "must be an https URL"),
        ("https://user:pw@127.0.0.1/done", "must not carry credentials"),
        ("/relative", "must be an https URL"),
        ("http://127.0.0.1:{other}/done", "origin http://127.0.0.1:"),
        ("http://127.0.0.1:{port}/%ZZ", "% not followed by two hex digits"),
        ("http://127.0.0.1:{port}/a|b", "must percent-encode"),
        ("http://127.0.0.1:{port}?token=1", "must have a path"),
    ],
)
def test_a_callback_off_the_allow_list_is_refused_with_a_400_naming_it_and_nothing_is_stored(
    stack: Stack, url: str, says: str
) -> None:
    before = manifests(stack)
    other = next(p for p in range(PORT + 1, PORT + 4) if p != CLOSED)  # a port of the allowed host not allowed
    reply = submit(stack, 3, url.replace("{port}", str(PORT)).replace("{other}", str(other)))
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert error["code"] == "malformed_request"
    assert error["field"] == "callback_url"
    assert says in error["message"], error["message"]
    assert manifests(stack) == before, "nothing was stored"


def test_a_submit_naming_a_callback_where_no_host_is_allowed_is_refused(tmp_path: Path) -> None:
    with started(tmp_path, {}) as bare:
        reply = submit(bare, 2, "https://hooks.example.com/done")
        assert reply.status == 400
        assert "CALLBACK_ALLOWED_HOSTS names no host" in reply.json()["error"]["message"]
        assert manifests(bare) == 0


def test_another_port_of_an_allowed_host_is_refused_as_is_a_callback_url_given_twice(stack: Stack) -> None:
    before = manifests(stack)
    storage = submit(stack, 2, f"http://127.0.0.1:{stack.azurite_ports.blob}/devstoreaccount1")
    app = submit(stack, 2, f"{stack.live_host().url}/api/queues")
    twice = submit(stack, 2, f"http://127.0.0.1:{PORT}/a", f"http://127.0.0.1:{PORT}/b")
    for reply in (storage, app, twice):
        assert reply.status == 400, reply.body
        assert reply.json()["error"]["field"] == "callback_url"
    assert "is not one of CALLBACK_ALLOWED_HOSTS" in storage.json()["error"]["message"]
    assert "is not one of CALLBACK_ALLOWED_HOSTS" in app.json()["error"]["message"]
    assert "more than once" in twice.json()["error"]["message"]
    assert manifests(stack) == before, "nothing was stored"


@pytest.mark.timeout(300)
def test_a_notice_is_posted_to_its_url_byte_for_byte_as_the_batch_reports_it(stack: Stack) -> None:
    path = "/hook/a%2fb%41,c;d?x=1&x=2&t=%7e&q=a+b"  # escapes and repeats a client library would rewrite
    with receiving(SECRET, port=PORT) as receiver:
        reply = submit(stack, 3, receiver.url(path))
        assert reply.status == 202, reply.body
        batch_id = reply.json()["batch_id"]
        status = wait_until(lambda: delivered(stack, batch_id), 90, "the notice to be delivered")
    assert reply.json()["callback_url"] == status["callback"]["url"] == receiver.url(path)
    assert [got.path for got in receiver.got] == [path]


@pytest.mark.timeout(300)
def test_the_status_route_shows_a_failed_attempts_class_and_reason_never_the_receivers_words(stack: Stack) -> None:
    banner = b"SSH-2.0-OpenSSH_9.6 internal-build-host-7"
    with receiving(SECRET, statuses=[500], port=PORT, answer=banner) as receiver:
        answered = submit(stack, 3, receiver.url("/hook")).json()["batch_id"]
        unreachable = submit(stack, 3, f"http://127.0.0.1:{CLOSED}/hook").json()["batch_id"]
        first = wait_until(lambda: attempted(stack, answered), 90, "a failed attempt answered 500")
        second = wait_until(lambda: attempted(stack, unreachable), 90, "a failed attempt where nothing listens")
    assert (first["callback"]["last_status"], first["callback"]["last_error"]) == ("5xx", "http_5xx")
    assert (second["callback"]["last_status"], second["callback"]["last_error"]) == (None, "connect_failed")
    for status in (first, second):
        text = json.dumps(status)
        assert "SSH" not in text
        assert "refused" not in text.lower()
        assert "Errno" not in text


def attempted(stack: Stack, batch_id: str) -> dict[str, Any] | None:
    status = stack.status(batch_id)
    return status if status and (status.get("callback") or {}).get("last_error") else None


@pytest.mark.timeout(300)
def test_a_batch_whose_final_stamp_storage_refuses_gets_its_notice_from_the_sweep_once_the_stamp_goes_through(
    stack: Stack,
) -> None:
    # Issue 36 item 3 on the whole stack: storage refuses the final stamp (the test holds a lease on the manifest,
    # so the host's write is a 412). A notice states only a status that won the stamp (issue 37, lifecycle seed
    # 601), so none goes while the stamp is refused; the timer's sweep (every 5 s here) finalizes the batch again,
    # and once storage takes the stamp, stamps it and stores its notice. Nothing here reads the batch's status (a
    # status read would finalize it too).
    with receiving(SECRET, port=PORT) as receiver:
        reply = submit(stack, 5, receiver.url("/stamp"), not_before="3")  # time to take the lease before it runs
        assert reply.status == 202, reply.body
        batch_id = reply.json()["batch_id"]
        with stack.blobs() as service:
            manifest = service.get_blob_client(stack.settings["BATCHES_CONTAINER"], f"{batch_id}/manifest.json")
            lease = manifest.acquire_lease(lease_duration=-1)
            try:
                wait_until(lambda: recorded(stack, batch_id) == 5, 90, "every item recorded")
                ticks = stack.invocations("fallback_poll")
                wait_until(lambda: stack.invocations("fallback_poll") >= ticks + 2, 60, "a whole sweep after that")
                refused = json.loads(manifest.download_blob().readall()).get("final_status")
                assert not of_batch(receiver, batch_id), "no notice while the stamp is refused"
                assert not has_notice(stack, batch_id), "none stored either"
            finally:
                lease.release()
            wait_until(lambda: of_batch(receiver, batch_id), 90, "the notice once the stamp goes through")
            stamped = json.loads(manifest.download_blob().readall()).get("final_status")
    assert refused is None, "the stamp was refused"
    assert stamped == "completed"
    got = of_batch(receiver, batch_id)[0]
    assert got.verified
    assert got.json()["type"] == "batch.completed"


def of_batch(receiver: Receiver, batch_id: str) -> list[Received]:
    """The attempts `receiver` got of this batch's notice (an earlier test's batch may still retry to its port)."""
    return [got for got in receiver.got if got.json()["data"]["batch_id"] == batch_id]


def recorded(stack: Stack, batch_id: str) -> int:
    """How many items of the batch have an outcome recorded (read from storage, not through the status route)."""
    return sum(len(successes(r)) + len(r.get("failed") or []) for r in stack.result_records(batch_id))


def has_notice(stack: Stack, batch_id: str) -> bool:
    with stack.blobs() as service:
        return bool(service.get_blob_client(stack.state_container, f"notices/{batch_id}.json").exists())
