"""The whole local stack as separate processes, for breaking on purpose: Azurite, the Service Bus stand-in
and one or more local hosts running the real function_app.py, each with its own data, ports and logs.

Every process is stopped (or killed) by its own pid. Ports are kept across restarts, so a restarted
Azurite or broker is found again by the clients that were talking to the old one.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.storage.blob import BlobServiceClient
from azure.storage.blob.aio import BlobServiceClient as AsyncBlobServiceClient
from azure.storage.queue import QueueClient

from devstack import azurite as azurite_launcher
from devstack import broker as broker_launcher
from devstack.host import ROOT, host
from devstack.procs import ManagedProcess, ServiceStartError, free_port
from shared.batch import results
from shared.core.events import Reason, TriggerEvent
from shared.store.result_store import list_entries, read_records

HANDLER = "tests.faults.handlers:record"


@dataclass
class Host:
    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")


@dataclass
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def call(url: str, method: str = "GET", body: bytes | None = None, headers: Mapping[str, str] | None = None) -> Reply:
    """One HTTP request; an HTTP error status is a Reply too (only a connection failure raises)."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback test URL
            return Reply(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.read(), dict(e.headers))


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


class Stack:
    """Azurite, the broker and `hosts` local hosts of the real app, sharing one set of app settings."""

    def __init__(self, root: Path, token: str, settings: Mapping[str, str] | None = None, *, lock_s: int = 5) -> None:
        self.root = root
        self.token = token
        self.azurite_ports = azurite_launcher.AzuritePorts.free()
        self.broker_port = free_port()
        self.trigger_queue = f"trigger-{token}"
        self.work_queue = f"work-{token}"
        self.results_container = f"results-{token}"
        self.state_container = f"state-{token}"
        self.handler_logs = root / "handled"
        self.handler_logs.mkdir(parents=True, exist_ok=True)
        self.broker_config = broker_launcher.write_config(
            root / "servicebus.json", {self.trigger_queue: {"LockDuration": f"PT{lock_s}S", "MaxDeliveryCount": 10}}
        )
        self.settings = {**self.base_settings(), **(settings or {})}
        self.azurite: ManagedProcess | None = None
        self.broker: ManagedProcess | None = None
        self.hosts: list[Host] = []

    # -- settings ------------------------------------------------------------------------------------

    @property
    def storage_connection_string(self) -> str:
        return azurite_launcher.connection_string(self.azurite_ports)

    @property
    def servicebus_connection_string(self) -> str:
        return broker_launcher.connection_string(self.broker_port, host="127.0.0.1")

    def base_settings(self) -> dict[str, str]:
        return {
            "FUNCTIONS_WORKER_RUNTIME": "python",
            "AzureWebJobsStorage": self.storage_connection_string,
            "ServiceBusConnection": self.servicebus_connection_string,
            "AzureFunctionsWebHost__hostid": f"faults-{self.token}",
            "TRIGGER_QUEUE": self.trigger_queue,
            "WORK_QUEUE": self.work_queue,
            "BATCHES_CONTAINER": f"batches-{self.token}",
            "RESULTS_CONTAINER": self.results_container,
            "STATE_CONTAINER": self.state_container,
            "FALLBACK_SCHEDULE": "*/5 * * * * *",
            "HANDLER": HANDLER,
            "FAULT_LOG_DIR": str(self.handler_logs),
            "FAULT_CHUNK_DELAY_S": "0",
            "LEASE_S": "15",
            "VISIBILITY_TIMEOUT_S": "10",
            "PUBLISH_TIMEOUT_S": "2",
            "RETRY_BASE_DELAY_MS": "500",
            "RETRY_MAX_DELAY_MS": "2000",
            "CHUNK_MAX_ITEMS": "500",
        }

    # -- processes -----------------------------------------------------------------------------------

    def start(self, hosts: int = 1) -> Stack:
        self.start_azurite()
        self.start_broker()
        for _ in range(hosts):
            self.add_host()
        return self

    def start_azurite(self) -> None:
        process = azurite_launcher.azurite(self.root / "azurite", self.azurite_ports, self.root / "azurite.log")
        self.azurite = process.start(timeout_s=60)

    def stop_azurite(self) -> None:
        if self.azurite is not None:
            self.azurite.stop(grace_s=15)

    def start_broker(self) -> None:
        process = broker_launcher.broker(
            self.broker_config, self.broker_port, self.root / "servicebus.log", data_dir=self.root / "servicebus"
        )
        self.broker = process.start(timeout_s=30)

    def stop_broker(self) -> None:
        if self.broker is not None:
            self.broker.stop(grace_s=10)

    def add_host(self) -> Host:
        index = len(self.hosts)
        port = free_port()
        process = host(ROOT, port, self.root / f"host-{index}.log", env=self.settings, grace_s=5)
        self.hosts.append(Host(process.start(timeout_s=60), port))
        return self.hosts[-1]

    def kill_host(self, index: int = 0) -> None:
        """SIGKILL, by its own pid: a crash, with no chance to settle anything."""
        self.hosts[index].process.kill()

    def restart_host(self, index: int = 0) -> None:
        self.hosts[index].process.stop(grace_s=0)  # closes the old log handle; the process is already dead
        self.hosts[index].process.start(timeout_s=60)

    def close(self) -> None:
        for h in reversed(self.hosts):
            h.process.stop(grace_s=10)
        for process in (self.broker, self.azurite):
            if process is not None:
                process.stop(grace_s=15)

    def live_host(self) -> Host:
        for h in self.hosts:
            if h.process.running():
                return h
        raise AssertionError("no host is running")

    def host_logs(self) -> str:
        return "\n".join(h.log() for h in self.hosts)

    # -- the API ---------------------------------------------------------------------------------------

    def submit(self, items: Sequence[Mapping[str, Any]], host_index: int = 0) -> dict[str, Any]:
        body = "\n".join(json.dumps(item, separators=(",", ":")) for item in items).encode()
        reply = call(
            f"{self.hosts[host_index].url}/api/batches", "POST", body, {"Content-Type": "application/x-ndjson"}
        )
        assert reply.status == 202, (reply.status, reply.body[:500])
        accepted: dict[str, Any] = reply.json()
        return accepted

    def status(self, batch_id: str) -> dict[str, Any] | None:
        """The batch status from any live host, or None while no host answers."""
        for h in self.hosts:
            if not h.process.running():
                continue
            try:
                reply = call(f"{h.url}/api/batches/{batch_id}")
            except OSError:
                continue
            if reply.status == 200:
                status: dict[str, Any] = reply.json()
                return status
        return None

    def wait_completed(self, batch_id: str, timeout_s: float) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            status = self.status(batch_id)
            return status if status and str(status["status"]).startswith("completed") else None

        try:
            result: dict[str, Any] = wait_until(done, timeout_s, f"batch {batch_id} to complete", every_s=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; last status {self.status(batch_id)}\n{self.tails()}") from None
        return result

    def tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- host {i}:\n{h.process.tail(lines)}" for i, h in enumerate(self.hosts))

    # -- looking into storage and the handler's notes ---------------------------------------------------

    def blobs(self) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.storage_connection_string)

    def queue(self, name: str) -> QueueClient:
        return QueueClient.from_connection_string(self.storage_connection_string, name)

    def result_records(self, batch_id: str) -> list[dict[str, Any]]:
        """The newest record of each lineage, read by the product's own reader (`shared.store.result_store`)."""

        async def read() -> tuple[int, list[dict[str, Any]]]:
            async with AsyncBlobServiceClient.from_connection_string(self.storage_connection_string) as service:
                container = service.get_container_client(self.results_container)
                lineages = len(results.newest(await list_entries(container, batch_id)))
                return lineages, await read_records(container, batch_id)

        lineages, records = asyncio.run(read())
        assert len(records) == lineages, "every blob holds the records its metadata lists"
        return records

    def leased_slots(self) -> int:
        with self.blobs() as service:
            container = service.get_container_client(self.state_container)
            if not container.exists():
                return 0
            blobs = container.list_blobs(name_starts_with=f"leases/{self.work_queue}/")
            return sum(1 for b in blobs if b.lease.state == "leased")

    def ring(self, count: int, reason: Reason = Reason.SUBMITTED, per_send: int = 100) -> None:
        """Send `count` trigger events for the work queue straight to the broker, as the app would."""
        event = TriggerEvent(azurite_launcher.ACCOUNT, self.work_queue, reason).encode()
        with ServiceBusClient.from_connection_string(self.servicebus_connection_string) as client:
            with client.get_queue_sender(self.trigger_queue) as sender:
                for start in range(0, count, per_send):
                    sender.send_messages([ServiceBusMessage(event) for _ in range(min(per_send, count - start))])

    def dead_lettered_events(self) -> int:
        with ServiceBusClient.from_connection_string(self.servicebus_connection_string) as client:
            with client.get_queue_receiver(self.trigger_queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
                return len(receiver.peek_messages(max_message_count=100))

    def executions(self) -> Counter[str]:
        """How often the handler started on each item id, across every host process that ever ran."""
        counts: Counter[str] = Counter()
        for path in self.handler_logs.glob("*.log"):
            counts.update(line for line in path.read_text().splitlines() if line)
        return counts

    def executions_by_process(self) -> dict[str, int]:
        return {p.stem: len(p.read_text().splitlines()) for p in self.handler_logs.glob("*.log")}

    def hosts_that_worked(self) -> int:
        """How many of the host processes started the handler on at least one item."""
        worked = {pid for pid, n in self.executions_by_process().items() if n > 0}
        return sum(1 for h in self.hosts if str(h.process.pid) in worked)

    def invocations(self, function: str, outcome: str = "Succeeded") -> int:
        """How many invocations of `function` the hosts logged as finished with `outcome`."""
        return self.host_logs().count(f"Executed 'Functions.{function}' ({outcome},")

    def starts(self, function: str) -> int:
        """How many invocations of `function` the hosts logged as started."""
        return self.host_logs().count(f"Executing 'Functions.{function}' (")


@contextmanager
def started(root: Path, settings: Mapping[str, str], hosts: int = 1) -> Iterator[Stack]:
    """A whole stack for one fixture, closed at the end; one that cannot start is `unavailable` (a CI failure)."""
    from tests.conftest import unavailable

    stack = Stack(root / "stack", uuid.uuid4().hex[:10], settings)
    try:
        stack.start(hosts=hosts)
    except ServiceStartError as e:
        stack.close()
        unavailable("the local stack", e)
        raise
    try:
        yield stack
    finally:
        stack.close()
