"""A queue nearing its scalability target says so (issue 13): in the log and in /api/queues, with the
partitions to spread it over; below it, measuring costs nothing."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from shared.engine import rates, wakeups
from shared.intake.submit import submit
from shared.ops.reports import read_queue_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all


@pytest.mark.parametrize(
    ("rate", "partitions", "advised"),
    [(1_600, 1, 2), (2_000, 1, 2), (1_900, 4, 8), (3_000, 1, 3)],
)
def test_partitions_are_advised_from_80_percent_of_the_target(rate, partitions, advised):
    assert rates.partitions_advised(rate, partitions) == advised
    said = rates.advice("work-items", rate, partitions)
    assert said is not None
    assert f"WORK_QUEUE_PARTITIONS to {advised} (now {partitions})" in said


def test_no_advice_well_under_the_target():
    assert rates.advice("work-items", 1_599, 1) is None
    assert not rates.near_target(0)


def test_the_meter_gives_the_rate_since_the_previous_sample():
    now = [100.0]
    meter = rates.RateMeter(lambda: now[0])
    meter.add(30)
    now[0] = 102.0
    meter.add(10)
    assert meter.sample() == 20.0
    now[0] = 104.0
    assert meter.sample() == 0.0


def items(n):
    return "\n".join(json.dumps({"id": f"r-{i}"}) for i in range(n)).encode()


async def paced(context):
    await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_queue_near_its_target_is_reported_with_the_partitions_to_add(configure, monkeypatch, caplog):
    """Azurite here cannot reach 2,000 messages/s, so the target is lowered to 10/s for this test (and the
    rate a drainer writes from, to 1/s); the measuring, writing, summing and advising are the app's own."""
    monkeypatch.setattr(rates, "QUEUE_TARGET_PER_S", 10)
    monkeypatch.setattr(wakeups, "REPORT_FROM_PER_S", 1.0)
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:record",
        CHUNK_MAX_ITEMS="1",
        CHUNK_CONCURRENCY="2",
        LEASE_S="15",
    )
    handlers.on_chunk.append(paced)
    await submit(services, items(300), content_type="application/x-ndjson", content_encoding=None, idempotency_key=None)
    caplog.set_level(logging.WARNING, logger="shared.engine.drainer")
    draining = asyncio.create_task(drain_all(services))
    await asyncio.sleep(6.5)  # past the first lease renewal (every LEASE_S / 3 = 5 s)
    [partition] = (await read_queue_status(services))["partitions"]
    report = await draining

    assert report.messages == 300
    assert partition["message_rate_per_s"] > 8, partition
    assert "WORK_QUEUE_PARTITIONS to" in (partition["advice"] or ""), partition
    assert any("WORK_QUEUE_PARTITIONS to" in r.getMessage() for r in caplog.records), "the drainer says so too"


@pytest.mark.slow
async def test_below_the_reporting_rate_a_drainer_writes_nothing_extra(configure):
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:record",
        CHUNK_MAX_ITEMS="1",
        CHUNK_CONCURRENCY="1",
        RECEIVERS="1",
    )
    handlers.on_chunk.append(paced)
    await submit(services, items(120), content_type="application/x-ndjson", content_encoding=None, idempotency_key=None)
    report = await drain_all(services)

    assert report.messages == 120
    assert report.seconds > 5, "long enough for a lease renewal"
    assert "blob.PutMetadata" not in report.transactions, report.transactions
    [partition] = (await read_queue_status(services))["partitions"]
    assert partition["message_rate_per_s"] == 0
    assert partition["advice"] is None
