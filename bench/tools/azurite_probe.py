"""Azurite's own latency on a newcomer's path, taken at the same moments as the newcomer's (`bench.fairness`).

After a newcomer's submit is acknowledged, the drain reaches its items through storage calls a drainer makes:
it lists the partition's lanes (ListQueues with metadata, `shared.engine.lane_queues.listed`), then receives
from the newcomer's lane (GetMessages). Right after each of B's 202s the bench makes those same calls on the
same Azurite, listing the same partition's lanes and receiving from a probe queue of its own (named outside the
partition, so no drainer takes it for a lane), plus the calls of B's submit
(PutMessage, PutBlob, GetBlob), and times each. The time B waits beyond the list and the receive is the app's
own (`parts`, pure): the drainer's cadence, its event loop, the handler call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue.aio import QueueServiceClient

from bench.tools.stats import summary
from shared.store.storage import configured

PATH_AFTER_ACK = ("list", "get")  # what a drainer must do, in storage, to hand B's items to the handler


class AzuriteProbe:
    def __init__(self, storage: str, partition: str) -> None:
        self.partition = partition
        self.queues = configured(partial(QueueServiceClient.from_connection_string, storage))
        self.blobs = configured(partial(BlobServiceClient.from_connection_string, storage))
        self.queue = self.queues.get_queue_client(f"probe-{partition}")
        self.container = self.blobs.get_container_client(f"probe-{partition}")
        self.samples: dict[str, dict[str, float]] = {}

    async def __aenter__(self) -> AzuriteProbe:
        with contextlib.suppress(ResourceExistsError):
            await self.queue.create_queue()
        with contextlib.suppress(ResourceExistsError):
            await self.container.create_container()
        await self.container.upload_blob("probe.json", b'{"probe":1}', overwrite=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.queue.delete_queue()
        with contextlib.suppress(Exception):
            await self.container.delete_container()
        await self.queues.close()
        await self.blobs.close()

    async def sample(self, tag: str) -> None:
        """Time each call of the path once, now (milliseconds), under `tag`."""
        found: dict[str, float] = {}

        async def timed(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
            started = time.monotonic()
            out = await call()
            found[name] = (time.monotonic() - started) * 1000
            return out

        async def listing() -> int:
            pages = self.queues.list_queues(name_starts_with=self.partition, include_metadata=True)
            return len([q async for q in pages])

        async def receive() -> list[Any]:
            pager = self.queue.receive_messages(messages_per_page=32, visibility_timeout=30).by_page()
            try:
                return [m async for m in await pager.__anext__()]
            except StopAsyncIteration:  # empty: a probe running beside this one took the message
                return []

        await timed("put", lambda: self.queue.send_message("probe"))
        await timed("list", listing)
        got = await timed("get", receive)
        for message in got:
            await self.queue.delete_message(message)
        await timed("put_blob", lambda: self.container.upload_blob("w.json", b"{}", overwrite=True))
        await timed("get_blob", lambda: self._read_blob())
        self.samples[tag] = found

    async def _read_blob(self) -> bytes:
        stream = await self.container.download_blob("probe.json")
        return bytes(await stream.readall())


def parts(latency_ms: dict[str, float], samples: dict[str, dict[str, float]]) -> dict[str, Any]:
    """B's latency per probe, split in Azurite's part (the list and receive timed at its 202) and the app's (the
    rest, never below 0); summaries of each, and of every timed operation (pure)."""
    both = [tag for tag in latency_ms if tag in samples]
    azurite = {tag: sum(samples[tag][op] for op in PATH_AFTER_ACK) for tag in both}
    app = {tag: max(0.0, latency_ms[tag] - azurite[tag]) for tag in both}
    ops: Sequence[str] = sorted({op for s in samples.values() for op in s})
    return {
        "probes": len(both),
        "b_latency_ms": summary([latency_ms[t] for t in both]),
        "azurite_path_ms": summary(list(azurite.values())),
        "app_added_ms": summary(list(app.values())),
        "operations_ms": {op: summary([s[op] for s in samples.values() if op in s]) for op in ops},
    }
