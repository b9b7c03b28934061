"""One whole local stack for the hostile suite: Azurite, the Service Bus stand-in and the local host running
the real function_app.py, with function keys checked from file-based secret storage, as in Azure.

Every reply the suite receives is kept (`HostileStack.replies`), so the last check can grep all of them,
and the host's log, for secrets. Limits are set low so oversized bodies stay cheap to send.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError

from devstack.host import ROOT
from tests.faults.stack import Stack, started, wait_until
from tests.host.test_keys import HOST_KEY as HOST
from tests.host.test_keys import MASTER, write_secrets

MASTER_KEY, HOST_KEY = MASTER, HOST  # the keys tests/host writes into host.json
SUBMIT_KEY = "hostile-submit-key-9d1b3f5e7a2c4e68"  # a key of submit_batch only

MAX_BODY_BYTES = 4 * 2**20
MAX_ITEM_BYTES = 8192
MAX_ITEMS = 5000
MAX_JSON_DEPTH = 32
MAX_GZIP_RATIO = 200


def secrets_folder(folder: Path) -> Path:
    """The host's file-based secret storage: a master key, a host key, and a key of submit_batch only."""
    write_secrets(folder)
    (folder / "submit_batch.json").write_text(json.dumps({"keys": [{"name": "default", "value": SUBMIT_KEY}]}))
    return folder


def settings_for(root: Path) -> dict[str, str]:
    return {
        "AzureWebJobsSecretStorageType": "files",
        "FUNCTIONS_SECRETS_PATH": str(secrets_folder(root / "secrets")),
        "HANDLER": "tests.hostile.handlers:settle",
        "HOSTILE_LOG_DIR": str(root / "handled"),
        "HOSTILE_BROKEN_FLAG": str(root / "broken"),
        "MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "MAX_ITEM_BYTES": str(MAX_ITEM_BYTES),
        "MAX_ITEMS": str(MAX_ITEMS),
        "MAX_JSON_DEPTH": str(MAX_JSON_DEPTH),
        "MAX_GZIP_RATIO": str(MAX_GZIP_RATIO),
        "MAX_DEQUEUE_COUNT": "2",
        "RETRY_BASE_DELAY_MS": "200",
        "RETRY_MAX_DELAY_MS": "400",
    }


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names

    def json(self) -> Any:
        return json.loads(self.body)


def send(port: int, method: str, path: str, body: bytes | None, headers: Mapping[str, str]) -> Reply:
    """Exactly these bytes and headers (http.client adds only Host, Content-Length and Accept-Encoding)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request(method, path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return Reply(response.status, response.read(), {k.lower(): v for k, v in response.getheaders()})
    finally:
        connection.close()


@dataclass
class HostileStack:
    stack: Stack
    root: Path
    replies: list[Reply] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.stack.hosts[0].url

    @property
    def broken_flag(self) -> Path:
        return self.root / "broken"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        key: str | None = HOST_KEY,
    ) -> Reply:
        """One request to the host (with a valid host key unless `key` says otherwise); the reply is kept."""
        sent = dict(headers or {})
        if key is not None:
            sent["x-functions-key"] = key
        reply = send(self.stack.hosts[0].port, method, path, body, sent)
        self.replies.append(reply)
        return reply

    def secrets(self) -> dict[str, str]:
        """Every secret value the stack was given: none may ever be seen in a log line or a reply."""
        found = dict(re.findall(r"(AccountKey|SharedAccessKey)=([^;]+)", self.stack.storage_connection_string))
        found.update(re.findall(r"(SharedAccessKey)=([^;]+)", self.stack.servicebus_connection_string))
        return {**found, "master key": MASTER_KEY, "host key": HOST_KEY, "function key": SUBMIT_KEY}

    def work_depth(self) -> int:
        """Messages in the work queue, visible or not (0 while nothing ever created it)."""
        try:
            props = self.stack.queue(self.stack.work_queue).get_queue_properties()
        except ResourceNotFoundError:
            return 0
        return int(props.approximate_message_count or 0)

    def batch_blobs(self) -> set[str]:
        with self.stack.blobs() as service:
            container = service.get_container_client(self.stack.settings["BATCHES_CONTAINER"])
            if not container.exists():
                return set()
            return {b.name for b in container.list_blobs()}

    def wait_drained(self, timeout_s: float = 60) -> None:
        """Until the work queue holds no message (visible or in flight) but the hidden chunks of scheduled batches
        (a submit with a `not_before` days ahead, as schemathesis sends: they wait there until then)."""
        drained = lambda: self.work_depth() == self.scheduled_chunks()  # noqa: E731
        wait_until(drained, timeout_s, "the work queue to drain", every_s=0.5)

    def scheduled_chunks(self) -> int:
        """Chunks of the batches the list shows `scheduled` (none of a scheduled batch's chunks is done), over every
        page of the list."""
        pending, continuation = 0, ""
        while True:
            page = self.request("GET", f"/api/batches?continuation={continuation}" if continuation else "/api/batches")
            assert page.status == 200, page.body[:300]
            listed = page.json()
            pending += sum(b["chunks"]["total"] for b in listed["batches"] if b["status"] == "scheduled")
            if not (continuation := listed["continuation"]):
                return pending

    def executions(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for path in (self.root / "handled").glob("*.log"):
            counts.update(line for line in path.read_text().splitlines() if line)
        return counts

    def alive(self) -> bool:
        """The host process still runs and still answers a real request."""
        if not self.stack.hosts[0].process.running():
            return False
        return self.request("GET", "/api/queues").status == 200

    def cli_argv(self, *args: str, key: str | None = HOST_KEY) -> list[str]:
        """`python -m shared.cli --url <host> [--key K] args...`"""
        argv = [sys.executable, "-m", "shared.cli", "--url", self.url]
        return [*argv, "--key", key, *args] if key is not None else [*argv, *args]

    def cli(self, *args: str, key: str | None = HOST_KEY, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        """The CLI as its own process; its output is kept with the replies."""
        [done] = self.cli_together(1, *args, key=key, timeout_s=timeout_s)
        return done

    def cli_together(
        self, count: int, *args: str, key: str | None = HOST_KEY, timeout_s: float = 180
    ) -> list[subprocess.CompletedProcess[str]]:
        """`count` copies of one CLI command started at once (operators racing each other). Output is read
        as bytes, so a progress bar's carriage returns survive."""
        argv = self.cli_argv(*args, key=key)
        procs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(count)]
        done = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s)
            self.replies.append(Reply(proc.returncode, out + err))
            done.append(subprocess.CompletedProcess(argv, proc.returncode, out.decode(), err.decode()))
        return done


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileStack]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "handled").mkdir()
    with started(root, settings_for(root)) as stack:
        yield HostileStack(stack, root)


def json_error(reply: Reply) -> dict[str, Any]:
    """The `error` object of a JSON error reply (fails naming the reply if it is not one)."""
    assert reply.headers.get("content-type", "").startswith("application/json"), (reply.status, reply.headers)
    body = reply.json()
    assert isinstance(body, dict), body
    error: dict[str, Any] = body["error"]
    assert isinstance(error, dict), body
    assert error["code"], body
    assert error["message"], body
    return error


def wait_status(hostile: HostileStack, batch_id: str, done: set[str], timeout_s: float = 90) -> dict[str, Any]:
    """The batch status once it is one of `done` (read over the API, with a key)."""

    def reached() -> dict[str, Any] | None:
        reply = hostile.request("GET", f"/api/batches/{batch_id}")
        status: dict[str, Any] | None = reply.json() if reply.status == 200 else None
        return status if status and status["status"] in done else None

    try:
        result: dict[str, Any] = wait_until(reached, timeout_s, f"batch {batch_id} to reach {done}", every_s=0.5)
    except AssertionError as e:
        last = hostile.request("GET", f"/api/batches/{batch_id}").body.decode(errors="replace")
        raise AssertionError(f"{e}; last status {last}\n{hostile.stack.tails(60)}") from None
    return result
