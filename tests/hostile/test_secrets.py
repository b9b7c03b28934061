"""No secret the stack was given (storage account key, Service Bus SharedAccessKey, function keys) ever appears
in a host log line, an API reply or the CLI's output. Runs after the rest of the suite, so it sees every
reply the suite collected; it also provokes the answers most likely to echo a secret."""

from __future__ import annotations

import time

import pytest

from tests.hostile.cases import JSON, VALID
from tests.hostile.conftest import HOST_KEY, MASTER_KEY, SUBMIT_KEY, HostileStack

pytestmark = pytest.mark.hostile


def provoke(hostile: HostileStack) -> None:
    """Right and wrong keys in the header and the query string, on every kind of answer: none may come back."""
    for key in (HOST_KEY, MASTER_KEY, SUBMIT_KEY):
        for wrong in (key[:-1], key + "0"):
            hostile.request("GET", f"/api/queues?code={wrong}", key=None)
            hostile.request("POST", "/api/batches", VALID, JSON, key=wrong)
        hostile.request("GET", f"/api/batches/{'0' * 32}?code={key}", key=None)
        hostile.request("POST", "/api/poison/replay", b'{"x": 1}', JSON, key=key)
        hostile.request("GET", "/api/poison/nothing", key=key)
        hostile.request("POST", f"/api/batches?code={key}", b"{", JSON, key=None)
    hostile.cli("poison", "show", "nothing", key=MASTER_KEY)
    hostile.cli("submit", "/nonexistent/file", key=SUBMIT_KEY)


def test_no_secret_appears_in_host_logs_replies_or_cli_output(hostile: HostileStack) -> None:
    provoke(hostile)
    hostile.wait_drained()
    secrets = hostile.secrets()
    assert {"AccountKey", "SharedAccessKey", "master key"} <= set(secrets), "the check knows what to look for"
    logs = hostile.stack.host_logs()
    assert "Executing 'Functions.submit_batch'" in logs, "the host's log was captured"
    assert len(hostile.replies) >= 200, "the suite's replies were collected"
    leaks = [
        f"{name} in {where}"
        for name, value in secrets.items()
        for where, text in [
            ("the host log", logs.encode()),
            *((f"reply {i}", r.body) for i, r in enumerate(hostile.replies)),
        ]
        if value.encode() in text
    ]
    assert not leaks, leaks


MALFORMED = [
    # bare LF line endings, the key in a header
    b"GET /api/queues HTTP/1.1\nHost: h\nx-functions-key: {key}\n\n",
    # a control character in the key's header
    b"GET /api/queues HTTP/1.1\r\nHost: h\r\nx-functions-key: {key}\x01\r\n\r\n",
    # the key in the query of a malformed request line
    b"GET /api/queues?code={key} HTTP/1.1\nHost: h\n\n",
    # a header line without a colon, after the key
    b"GET /api/queues HTTP/1.1\r\nHost: h\r\nx-functions-key: {key}\r\nno colon {key}\r\n\r\n",
]


@pytest.mark.parametrize("template", MALFORMED)
def test_a_malformed_request_carrying_a_key_is_refused_without_echoing_the_key(
    hostile: HostileStack, template: bytes
) -> None:
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(hostile.url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        conn.sendall(template.replace(b"{key}", HOST_KEY.encode()))
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    assert reply.split(b" ", 2)[1:2] == [b"400"], reply[:200]
    assert HOST_KEY.encode() not in reply, "the key came back in the answer"
    assert HOST_KEY[:12] not in reply.decode("latin-1"), "part of the key came back in the answer"
    time.sleep(0.3)  # the host writes its log line after answering
    assert HOST_KEY not in hostile.stack.host_logs(), "the key reached the host log"
