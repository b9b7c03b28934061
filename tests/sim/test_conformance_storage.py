"""The simulated storage held to the real one: each test runs against Azurite and against `sim.storage.transport`,
through the same SDK clients the app builds (`shared.store.storage.configured`) and the app's own error
translation, and asserts what the app relies on, failure answers included."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient
from azure.storage.queue.aio import QueueServiceClient

from shared.core.errors import PopReceiptMismatch, PreconditionFailed, ResourceConflict, ResourceMissing, StorageError
from shared.store.storage import configured, read_json, translated, write_json
from sim.storage import transport as simstorage
from sim.storage.account import CONNECTION_STRING, Account
from tests.conftest import Names


@dataclass
class Backend:
    kind: str
    queues: QueueServiceClient
    blobs: BlobServiceClient
    clock: list[float]

    async def wait(self, seconds: float) -> None:
        """Let `seconds` pass on the service's clock."""
        if self.kind == "sim":
            self.clock[0] += seconds
        else:
            await asyncio.sleep(seconds)


@pytest.fixture(params=["sim", "real"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    clock = [2_000_000_000.0]
    if request.param == "sim":
        rng = random.Random(0)
        server = simstorage.StorageServer(Account(), lambda: clock[0], rng)
        transport = simstorage.SimTransport(server, simstorage.StorageWeather(rng, latency_s=(0.0, 0.0)))
        conn, extra = CONNECTION_STRING, {"transport": transport}
    else:
        conn, extra = request.getfixturevalue("storage_connection_string"), {}
    queues = configured(partial(QueueServiceClient.from_connection_string, conn, **extra))
    blobs = configured(partial(BlobServiceClient.from_connection_string, conn, **extra))
    yield Backend(request.param, queues, blobs, clock)
    await queues.close()
    await blobs.close()


@pytest.mark.slow
async def test_a_received_message_is_hidden_counted_and_settled_only_by_its_latest_pop_receipt(
    backend: Backend, names: Names
) -> None:
    queue = backend.queues.get_queue_client(names.queue())
    await queue.create_queue()
    sent = await queue.send_message("chunk <&> 1", time_to_live=-1)
    assert sent.id
    got = [m async for m in queue.receive_messages(messages_per_page=32, visibility_timeout=1)]
    assert [(m.content, m.dequeue_count) for m in got] == [("chunk <&> 1", 1)]
    assert [m async for m in queue.receive_messages(messages_per_page=32, visibility_timeout=1)] == []
    assert (await queue.get_queue_properties()).approximate_message_count == 1  # invisible ones count
    updated = await queue.update_message(got[0], pop_receipt=got[0].pop_receipt, content="rest", visibility_timeout=1)
    with pytest.raises(PopReceiptMismatch) as stale:
        async with translated("delete with a stale receipt"):
            await queue.delete_message(got[0].id, pop_receipt=got[0].pop_receipt)
    assert stale.value.status == 400  # PopReceiptMismatch: a StorageError, not ResourceMissing
    assert "POP_RECEIPT_MISMATCH" in str(stale.value.error_code)
    await backend.wait(2.5)
    again = [m async for m in queue.receive_messages(messages_per_page=32, visibility_timeout=30)]
    assert [(m.content, m.dequeue_count) for m in again] == [("rest", 2)]
    with pytest.raises(StorageError) as stale_again:
        async with translated("delete with the receipt before the receive"):
            await queue.delete_message(again[0].id, pop_receipt=updated.pop_receipt)
    assert stale_again.value.status == 400
    await queue.delete_message(again[0].id, pop_receipt=again[0].pop_receipt)
    with pytest.raises(ResourceMissing):
        async with translated("delete a deleted message"):
            await queue.delete_message(again[0].id, pop_receipt=again[0].pop_receipt)
    assert (await queue.get_queue_properties()).approximate_message_count == 0


async def test_peek_neither_hides_nor_counts_and_an_update_can_make_a_message_visible_at_once(
    backend: Backend, names: Names
) -> None:
    queue = backend.queues.get_queue_client(names.queue())
    await queue.create_queue()
    for n in range(3):
        await queue.send_message(f"m{n}", time_to_live=-1)
    peeked = await queue.peek_messages(max_messages=2)
    assert [m.content for m in peeked] == ["m0", "m1"]
    assert [m.dequeue_count for m in peeked] == [0, 0]
    page = await queue.receive_messages(messages_per_page=1, visibility_timeout=30).by_page().__anext__()
    got = [m async for m in page]  # one GetMessages, as the drainer's receiver makes it
    assert [(m.content, m.dequeue_count) for m in got] == [("m0", 1)]
    assert [m.content for m in await queue.peek_messages(max_messages=32)] == ["m1", "m2"]
    await queue.update_message(got[0], pop_receipt=got[0].pop_receipt, visibility_timeout=0)
    assert sorted(m.content for m in await queue.peek_messages(max_messages=32)) == ["m0", "m1", "m2"]


async def test_a_missing_queue_answers_not_found_and_creating_one_twice_is_no_error(
    backend: Backend, names: Names
) -> None:
    missing = backend.queues.get_queue_client(names.queue("missing"))
    with pytest.raises(ResourceMissing):
        async with translated("depth of a missing queue"):
            await missing.get_queue_properties()
    queue = backend.queues.get_queue_client(names.queue())
    await queue.create_queue()
    with pytest.raises(ResourceConflict):  # the app's create-once helper takes this as "it exists"
        async with translated("create it again"):
            await queue.create_queue()


async def test_queue_metadata_is_listed_by_prefix(backend: Backend, names: Names) -> None:
    prefix = names.queue("lanes")
    for suffix in ("", "-t-a", "-h-b"):
        await backend.queues.get_queue_client(prefix + suffix).create_queue()
    await backend.queues.get_queue_client(prefix + "-t-a").set_queue_metadata({"submitted": "17-abc"})
    listed = {
        q.name: q.metadata async for q in backend.queues.list_queues(name_starts_with=prefix, include_metadata=True)
    }
    assert set(listed) == {prefix, prefix + "-t-a", prefix + "-h-b"}
    assert listed[prefix + "-t-a"] == {"submitted": "17-abc"}
    assert not listed[prefix]
    props = await backend.queues.get_queue_client(prefix + "-t-a").get_queue_properties()
    assert props.metadata == {"submitted": "17-abc"}


async def test_blob_writes_are_conditional_on_etags_and_absence(backend: Backend, names: Names) -> None:
    container = backend.blobs.get_container_client(names.container("c"))
    await container.create_container()
    with pytest.raises(ResourceConflict):
        async with translated("create it again"):
            await container.create_container()
    with pytest.raises(ResourceMissing):
        await read_json(container, "b/manifest.json")
    first = await write_json(container, "b/manifest.json", {"state": "staging"}, create_only=True)
    with pytest.raises(ResourceConflict):
        await write_json(container, "b/manifest.json", {"state": "other"}, create_only=True)
    second = await write_json(container, "b/manifest.json", {"state": "accepted"}, etag=first)
    assert second != first
    with pytest.raises(PreconditionFailed):
        await write_json(container, "b/manifest.json", {"state": "late"}, etag=first)
    assert await read_json(container, "b/manifest.json") == ({"state": "accepted"}, second)
    data = b"\x1f\x8b raw gzip bytes"
    await container.get_blob_client("b/cc").upload_blob(data, overwrite=True)
    assert await (await container.download_blob("b/cc", decompress=False)).readall() == data
    await container.get_blob_client("empty").upload_blob(b"", overwrite=True)
    assert await (await container.download_blob("empty")).readall() == b""
    await container.delete_blob("b/cc")
    with pytest.raises(ResourceMissing):
        async with translated("delete again"):
            await container.delete_blob("b/cc")


async def test_blob_listings_carry_metadata_lease_state_and_markers(backend: Backend, names: Names) -> None:
    container = backend.blobs.get_container_client(names.container("c"))
    await container.create_container()
    for n in range(5):
        await container.get_blob_client(f"index/{n}").upload_blob(b"", overwrite=True, metadata={"items": str(n)})
    await container.get_blob_client("other").upload_blob(b"x", overwrite=True)
    pages: Any = container.list_blobs(name_starts_with="index/", include=["metadata"], results_per_page=2).by_page()
    first = [b async for b in await pages.__anext__()]
    assert [(b.name, b.metadata) for b in first] == [("index/0", {"items": "0"}), ("index/1", {"items": "1"})]
    marker = pages.continuation_token
    assert marker
    rest: Any = container.list_blobs(name_starts_with="index/", include=["metadata"], results_per_page=2)
    names_after = [b.name async for b in await rest.by_page(continuation_token=marker).__anext__()]
    assert names_after == ["index/2", "index/3"]
    lease = BlobLeaseClient(container.get_blob_client("index/4"))
    await lease.acquire(lease_duration=15)
    states = {b.name: b.lease.state async for b in container.list_blobs(name_starts_with="index/")}
    assert states["index/4"] == "leased"
    assert states["index/0"] == "available"


@pytest.mark.slow
async def test_a_lease_excludes_others_guards_writes_and_expires(backend: Backend, names: Names) -> None:
    container = backend.blobs.get_container_client(names.container("c"))
    await container.create_container()
    blob = container.get_blob_client("leases/work/0")
    await blob.upload_blob(b"", overwrite=False)
    with pytest.raises(ResourceConflict):
        async with translated("create the lease blob again"):
            await blob.upload_blob(b"", overwrite=False)
    mine, theirs = BlobLeaseClient(blob), BlobLeaseClient(blob)
    await mine.acquire(lease_duration=15)
    with pytest.raises(ResourceConflict):
        async with translated("acquire a held lease"):
            await theirs.acquire(lease_duration=15)
    with pytest.raises(PreconditionFailed):
        async with translated("write metadata without the lease"):
            await blob.set_blob_metadata({"rate": "1"})
    await blob.set_blob_metadata({"rate": "150"}, lease=mine)
    await mine.renew()
    await backend.wait(16)
    await theirs.acquire(lease_duration=15)  # ours expired: anyone may take it
    with pytest.raises(ResourceConflict):
        async with translated("renew a lease another took over"):
            await mine.renew()
    await theirs.release()
    await mine.acquire(lease_duration=15)
    await mine.release()
    await theirs.acquire(lease_duration=15)  # a released lease is free at once
