"""What a cancel, a drainer's look at the ended batches and a results page cost, counted by the app's own storage
metering on the real Azurite (issue 36 item 9): each grows with the work asked for, not with history."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timedelta, timezone

import pytest
from azure.storage.blob.aio import ContainerClient
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.settlement import settle
from shared.engine.chunks import ChunkWork
from shared.handlers import ItemOutcome
from shared.ops import lifecycle
from shared.services import Services
from shared.store import ended
from shared.store.result_store import ResultWriter
from shared.telemetry import metering
from tests.app.conftest import wait_for
from tests.app.sales import submit_ids

PAGE = 100  # blobs per listing page here (5,000 in Azure): HISTORY markers stand for 50 times as many
HISTORY = 1_010  # markers of batches ended a day ago: eleven listing pages


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing pages of PAGE blobs (a real ListBlobs request each, counted as ever), so a history of 1,010 markers
    costs what 50,500 cost in pages of 5,000."""
    for method in ("list_blobs", "list_blob_names"):
        real = getattr(ContainerClient, method)

        def paged(self, *args, _real=real, **kwargs):  # type: ignore[no-untyped-def]
            return _real(self, *args, results_per_page=kwargs.pop("results_per_page", PAGE), **kwargs)

        monkeypatch.setattr(ContainerClient, method, paged)


async def history(services: Services, count: int) -> None:
    """`count` markers written a day ago, named as the app names them."""
    state = await services.storage.ensure_container(services.settings.state_container)
    bucket = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y%m%dT%H%M")[:-1] + "0"  # ten minutes
    names = [f"ended/{bucket}/{secrets.token_hex(16)}" for _ in range(count)]
    gate = asyncio.Semaphore(64)

    async def put(name: str) -> None:
        async with gate:
            await state.upload_blob(name, b"")

    await asyncio.gather(*(put(name) for name in names))


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_cancel_and_a_drainer_s_look_at_ended_batches_cost_what_recent_cancels_wrote(configure, small_pages):
    services = configure(CHUNK_MAX_ITEMS="5")
    await history(services, HISTORY)
    batch_id = await submit_ids(services, [f"m-{i}" for i in range(5)])
    batches = services.storage.container(services.settings.batches_container)
    work = ChunkWork(services, batches, time.monotonic)
    assert not await work._is_ended(batch_id)  # the process's first look: every marker, once

    with metering.tally() as cancelling:
        await lifecycle.cancel(services, batch_id)
    services.ended._mine.clear()  # what another process knows: only what it lists
    services.ended.listed_at = time.monotonic() - 2 * services.ended.fresh_s
    with metering.tally() as looking:
        assert await work._is_ended(batch_id), "the cancel is seen"

    # Before: a cancel listed every marker to prune (11 pages), and so did every look every 5 s.
    assert cancelling["blob.ListBlobs"] <= 4, dict(cancelling)  # the bucket it prunes, and the batch's results 3x
    assert looking["blob.ListBlobs"] <= 2, dict(looking)  # the ten minutes' bucket (two across a boundary)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_results_page_reads_the_blobs_of_the_chunks_it_spans(configure):
    services = configure(CHUNK_MAX_ITEMS="1")
    batch_id = await submit_ids(services, [f"p-{i}" for i in range(300)])
    container = await services.storage.ensure_container(services.settings.results_container)
    writer = ResultWriter(container)
    for chunk in range(300):  # one blob each: chunks that settled apart
        outcome = ItemOutcome.success({"chunk": chunk})
        s = settle(batch_id=batch_id, chunk=chunk, gen=0, positions=[0], outcomes=[outcome], attempt=1, max_attempts=5)
        await writer.write(s.record)
    manifest, _, entries = await lifecycle.read(services, batch_id)

    async def page(start: int, limit: int) -> tuple[list[int], dict[str, int]]:
        with metering.tally() as spent:
            lines = lifecycle.export(services, manifest, entries, status=None, start=start, limit=limit)
            positions = [line["position"] async for line in lines]
        return positions, dict(spent)

    one, spent_one = await page(0, 1)
    ten, spent_ten = await page(150, 10)
    everything, _ = await page(0, 1000)

    assert one == [0]
    assert ten == list(range(150, 160))
    assert everything == list(range(300))
    # Before: 256 reads for either page (a whole window of chunks, whatever the limit).
    assert spent_one == {"blob.GetBlob": 1}
    assert spent_ten == {"blob.GetBlob": 10}


@given(
    st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(timezone.utc)),
    st.floats(0, 3600),
    st.floats(-ended.LOOKBACK_S / 2 - ended.CLOCK_SKEW_S, 3600 + ended.CLOCK_SKEW_S),
)
def test_a_listing_since_a_time_reads_the_bucket_of_every_marker_written_since(
    since: datetime, waited_s: float, written_s: float
) -> None:
    """A marker whose write ended after `since` was named at most LOOKBACK_S / 2 before (a slower write is written
    again), by a clock at most CLOCK_SKEW_S apart: the listing reads its bucket, or reads every bucket."""
    now = since + timedelta(seconds=waited_s)
    written = since + timedelta(seconds=min(written_s, waited_s + ended.CLOCK_SKEW_S))
    prefixes = ended.buckets_since(since, now)
    assert prefixes is None or f"{ended.PREFIX}{ended.bucket(written)}/" in prefixes
    if waited_s <= 10:
        assert prefixes is not None
        assert len(prefixes) <= 2, "a look every 5 s reads one bucket, two across a boundary"
    assert ended.parse(ended.marker("a" * 32, written)) == (
        "a" * 32,
        datetime.strptime(ended.bucket(written), ended.BUCKET_FORMAT).replace(tzinfo=timezone.utc),
    )
    assert ended.parse(f"{ended.PREFIX}{'b' * 32}") == ("b" * 32, None), "a marker named before buckets"


async def test_a_process_s_first_look_deletes_markers_no_cancel_pruned_in_time(configure):
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    aged = [ended.marker(secrets.token_hex(16), datetime.now(timezone.utc) - timedelta(days=8)) for _ in range(3)]
    recent = ended.marker("c" * 32, datetime.now(timezone.utc) - timedelta(days=6))
    for name in [*aged, recent]:
        await state.upload_blob(name, b"")
    work = ChunkWork(services, services.storage.container(services.settings.batches_container), time.monotonic)

    assert await work._is_ended("c" * 32), "a marker younger than 7 days counts"
    assert not await work._is_ended(ended.parse(aged[0])[0]), "an older one does not"

    async def pruned() -> bool:
        return [n async for n in state.list_blob_names(name_starts_with=ended.PREFIX)] == [recent]

    await wait_for(pruned, 10, "the aged markers deleted")
