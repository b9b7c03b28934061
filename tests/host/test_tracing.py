"""One trace from a submit to every chunk's handler: the real function_app.py in the local host, with the real
Azurite and broker, exporting its spans to the trace file (`TRACES_FILE`, the exporter `make run` uses).

The context crosses two carriers the app owns: the Service Bus trigger event (application properties) and each
chunk's envelope (`"t"`). Old chunks without it still decode (tests at the end, pure).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack.host import ROOT
from shared.batch import envelope
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost
from tests.host.test_function_app import app_settings, poll_until_done, submit_example

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def traced_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[tuple[RunningHost, Path]]:
    traces = tmp_path / "traces.jsonl"
    env = app_settings(azurite_service, servicebus_service, names, "trace") | {
        "TRACES_FILE": str(traces),
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # export every 0.2 s instead of 5 s: the test reads the file soon
        "APPLICATIONINSIGHTS_CONNECTION_STRING": "",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env), traces
    finally:
        launcher.stop_all()


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_spans(path: Path, batch_id: str, chunks: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        spans = spans_in(path)
        handled = [
            s
            for s in spans
            if s["name"] == "queue_drain.chunk" and s["attributes"].get("queue_drain.batch_id") == batch_id
        ]
        if len(handled) >= chunks or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


async def test_one_trace_spans_the_submit_the_event_the_drain_and_every_chunk(
    traced_host: tuple[RunningHost, Path],
) -> None:
    host, traces = traced_host
    async with aiohttp.ClientSession(base_url=host.base_url) as session:
        accepted = await submit_example(session)
        status = await poll_until_done(session, accepted["status_url"], timeout_s=60)
    assert status["status"] == "completed", status
    batch_id, chunks = accepted["batch_id"], accepted["chunks"]
    assert chunks >= 2
    spans = wait_for_spans(traces, batch_id, chunks)

    [submit] = [s for s in spans if s["name"] == "queue_drain.submit"]
    assert submit["attributes"]["queue_drain.batch_id"] == batch_id
    assert submit["attributes"]["queue_drain.items"] == 1000
    trace = [s for s in spans if s["trace_id"] == submit["trace_id"]]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in trace:
        by_name.setdefault(s["name"], []).append(s)

    # The doorbell: published inside the submit, and the drain it woke is its child, across Service Bus.
    doorbell = [
        p
        for p in by_name.get("queue_drain.publish", [])
        if p["attributes"].get("queue_drain.reason") == "submitted" and p["parent_id"] == submit["span_id"]
    ]
    assert len(doorbell) == 1, by_name.get("queue_drain.publish")
    woken = [d for d in by_name.get("queue_drain.drain", []) if d["parent_id"] == doorbell[0]["span_id"]]
    assert len(woken) == 1, [(d["parent_id"], d["attributes"]) for d in by_name.get("queue_drain.drain", [])]
    assert woken[0]["attributes"]["queue_drain.reason"] == "submitted"
    assert woken[0]["start_ns"] >= doorbell[0]["start_ns"]

    # Every chunk's handling: a child of the submit (through its envelope), linked to the session that ran it.
    handled = [c for c in by_name.get("queue_drain.chunk", []) if c["attributes"]["queue_drain.batch_id"] == batch_id]
    assert sorted(c["attributes"]["queue_drain.chunk"] for c in handled) == list(range(chunks))
    assert all(c["parent_id"] == submit["span_id"] for c in handled)
    assert sum(c["attributes"]["queue_drain.items"] for c in handled) == 1000
    assert {c["attributes"]["queue_drain.outcome"] for c in handled} == {"complete"}
    sessions = {s["span_id"] for s in spans if s["name"] == "queue_drain.drain"}
    assert all(c["links"] for c in handled)
    assert all(link["span_id"] in sessions for c in handled for link in c["links"])

    # The waterfall a person reads: `python -m shared.cli trace BATCH_ID`.
    shown = await asyncio.to_thread(cli_trace, batch_id, traces)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"batch {batch_id}: ")
    assert any(" submit " in line for line in lines)
    assert any(" publish " in line and "reason=submitted" in line for line in lines)
    assert sum("chunk chunk=" in line for line in lines) == chunks
    assert any(line.startswith("wake: doorbell published -> drain started in ") for line in lines)


def cli_trace(batch_id: str, traces: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "shared.cli", "trace", batch_id, "--file", str(traces)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_says_when_a_batch_has_no_spans(tmp_path: Path) -> None:
    shown = cli_trace("no-such-batch", tmp_path / "none.jsonl")
    assert shown.returncode == 1
    assert "no spans for batch no-such-batch" in shown.stdout


def test_a_chunk_written_before_tracing_decodes_with_no_trace() -> None:
    old = '{"v":1,"b":"0123456789abcdef0123456789abcdef","a":"x1","c":3,"g":0,"items":[{"id":1}]}'
    decoded = envelope.decode(old)
    assert decoded.header.trace is None
    assert decoded.header.chunk == 3
    assert decoded.items == [{"id": 1}]


def test_a_chunk_carries_its_submits_traceparent_and_ignores_a_malformed_one() -> None:
    header = envelope.ChunkHeader("0123456789abcdef0123456789abcdef", "x1", 0, trace=TRACEPARENT)
    text = envelope.encode_inline(header, ['{"id":1}'])
    assert text is not None
    assert envelope.decode(text).header.trace == TRACEPARENT
    forged = text.replace(TRACEPARENT, "00-not-a-trace-context")
    assert envelope.decode(forged).header.trace is None
