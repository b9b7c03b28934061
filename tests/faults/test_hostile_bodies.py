"""Large hostile bodies sent to a host while it drains (issue 12, defect 1).

The attack that found the defect: a 246 KB gzip of `{}` items (47 MB inflated) stalled every request and
drain of the host for seconds, added about a gigabyte, and made chunks of a running drain lose their
visibility and be redone. Here the same kinds of bodies hit a host in the middle of a slow drain: one
maximal uncompressed body (just under MAX_BODY_BYTES, refused only at its last line), four small gzips
that inflate to tens of megabytes at once, and bodies nested far beyond MAX_JSON_DEPTH on both routes
that read one.

Measured: the **loop stall** is the longest the host's event loop was kept from running, from the local
host's own loop watch (emulators/functions/looplag.py, set here to log every delay past 20 ms), and the
**loop's run** is how much of that delay the loop's own thread spent running (its CPU time). The app's promise
(nothing it runs holds the loop past 100 ms) is checked on the run: the defect ran the parse on the loop, seconds
of it. The stall's wall time also counts the waits the app does not cause, on a machine shared by several test
workers (its two cores busy elsewhere, or a decoding thread holding the interpreter lock for its turn): it is
bounded, at 500 ms, not held to 100 ms (CI once measured 127 ms with four workers on two cores). The **probe**
is the longest answer to a cheap anonymous GET sent every 50 ms, as a client sees it (it also waits its turn
for the interpreter lock, which the decoding threads share with the loop); the **RSS** is the host process's
resident set sampled every 20 ms, against its level just before the attack; **chunks redone** are the
handler's re-executions (no crash is injected, so any is a chunk that lost its visibility).
"""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.app.test_submit_failures import sprinkled
from tests.faults.audit import audit, items_for, paced
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import Reply, call, wait_until

pytestmark = pytest.mark.faults

CHUNK_ITEMS = 500
ITEMS = 40_000
MAX_BODY_BYTES = 64 * 2**20  # the app's default, left unchanged here
# 0.5 s per chunk, two at a time: the 80 chunks take about 20 s, so the attack lands mid-drain.
SLOW_DRAIN = paced(chunk_items=CHUNK_ITEMS, delay_s=0.5)
WATCH_MS = 20
BLOCKED = re.compile(r"The event loop was blocked for (\d+) ms .*?; its thread ran for (\d+) ms")


def stalls(log: str) -> tuple[int, int]:
    """The longest delay the loop watch logged, and the longest the loop's own thread ran within one."""
    found = [(int(wall), int(ran)) for wall, ran in BLOCKED.findall(log)]
    return max((w for w, _ in found), default=WATCH_MS), max((r for _, r in found), default=0)


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class Watch:
    """Two sampler threads: the probe's answer times and the host's resident set."""

    def __init__(self, probe: Callable[[], Reply], pid: int) -> None:
        self.probe, self.pid = probe, pid
        self.answers: list[float] = []
        self.failed: list[int] = []
        self.rss: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._probe, daemon=True), threading.Thread(target=self._rss)]

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=70)

    def _probe(self) -> None:
        while not self._stop.wait(0.05):
            started = time.monotonic()
            reply = self.probe()
            self.answers.append(time.monotonic() - started)
            if reply.status != 200:
                self.failed.append(reply.status)

    def _rss(self) -> None:
        while not self._stop.wait(0.02):
            self.rss.append(resident_bytes(self.pid))


def maximal_body() -> bytes:
    """Billing-shaped items up to just under MAX_BODY_BYTES and under MAX_ITEMS, the last line broken: the
    whole body is read and decoded before it is refused, the most a single request can make the host hold."""
    item = {"amount": "19.99", "currency": "EUR", "author": "a" * 40, "distributor": "d" * 40, "note": "n" * 100}
    lines = [json.dumps({"id": f"max-{n}", **item}, separators=(",", ":")).encode() for n in range(240_000)]
    body = b"\n".join(lines) + b'\n{"id": "broken'
    assert len(body) < MAX_BODY_BYTES
    return body


def post(url: str, body: bytes, content_type: str, encoding: str | None = None) -> Reply:
    headers = {"Content-Type": content_type, **({"Content-Encoding": encoding} if encoding else {})}
    return call(url, "POST", body, headers)


@pytest.mark.timeout(420)
def test_large_hostile_bodies_during_a_drain_neither_stall_the_host_nor_make_chunks_be_redone(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack({**SLOW_DRAIN, "LOCAL_HOST_LOOP_WARN_MS": str(WATCH_MS)})
    host = stack.hosts[0]
    submit_url, replay_url = f"{host.url}/api/batches", f"{host.url}/api/poison/replay"
    biggest = maximal_body()
    bomb = gzip.compress(sprinkled(b"{}\n", b"{} \n"), 6)
    deep = b'{"items":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    items = items_for(stack.token, ITEMS)
    batch_id = stack.submit(items)["batch_id"]
    wait_until(lambda: sum(stack.executions_by_process().values()) > 0, 60, "the drain to start")

    with Watch(lambda: call(f"{host.url}/api/openapi.json"), host.process.pid) as watch:
        time.sleep(1.0)
        before = max(watch.rss)
        attack_started = time.monotonic()
        alone = post(submit_url, biggest, "application/x-ndjson")
        single_peak = max(watch.rss) - before
        log_at = len(host.log())
        with ThreadPoolExecutor(6) as pool:
            bombs = [pool.submit(post, submit_url, bomb, "application/x-ndjson", "gzip") for _ in range(4)]
            nested = [pool.submit(post, url, deep, "application/json") for url in (submit_url, replay_url)]
            answers = [f.result() for f in (*bombs, *nested)]
        attack_s = time.monotonic() - attack_started
        status = stack.status(batch_id)
    assert status is not None
    assert status["status"] != "completed", "the attack must land mid-drain: slow it down"
    status = stack.wait_completed(batch_id, timeout_s=180)
    found = audit(stack, batch_id, items, CHUNK_ITEMS)

    assert alone.status == 400, alone.body[:300]
    assert alone.json()["error"]["code"] == "malformed_request", alone.body[:300]
    bomb_codes = sorted(a.status for a in answers[:4])
    assert set(bomb_codes) <= {413, 503}, bomb_codes
    assert 413 in bomb_codes, bomb_codes
    assert all(a.headers.get("Retry-After", "").isdigit() for a in answers[:4] if a.status == 503)
    assert [a.status for a in answers[4:]] == [400, 400], [a.body[:200] for a in answers[4:]]
    assert all("MAX_JSON_DEPTH" in a.body.decode() for a in answers[4:]), [a.body[:300] for a in answers[4:]]
    assert watch.answers
    assert not watch.failed, watch.failed
    logged = host.log()
    receive_ms, _ = stalls(logged[:log_at])
    stall_ms, ran_ms = stalls(logged[log_at:])
    probe = max(watch.answers)
    assert ran_ms <= 100, f"the gzips and deep bodies ran on the event loop for {ran_ms} ms at a stretch"
    assert stall_ms <= 500, f"the event loop waited {stall_ms} ms to run during the gzips and deep bodies"
    # The maximal body: the local host's HTTP layer receives and copies 60 MB on its loop (on Azure the .NET
    # host and the worker's gRPC thread do that); the app decodes it on a thread. Bounded, not within 100 ms.
    assert receive_ms <= 500, f"the maximal body blocked the event loop for {receive_ms} ms"
    assert single_peak < 3 * MAX_BODY_BYTES, f"one request added {single_peak / 2**20:.0f} MiB"
    assert status["status"] == "completed"
    assert (found.lost, found.duplicated, found.reexecutions) == (0, 0, 0), found
    mib = 2**20
    reliability.record(
        "10. large hostile bodies during a drain",
        found,
        tries=7,
        recover_s=(
            f"no recovery needed: loop stall max {stall_ms} ms (its thread running {ran_ms} ms of it) under the "
            f"gzips and deep bodies, {receive_ms} ms "
            f"while the local host received the maximal body; probe answer max {probe * 1000:.0f} ms "
            f"({len(watch.answers)} probes over the {attack_s:.0f} s attack); "
            f"RSS peak +{single_peak / mib:.0f} MiB for one {len(biggest) / mib:.0f} MiB body "
            f"({single_peak / MAX_BODY_BYTES:.1f}x MAX_BODY_BYTES), "
            f"+{(max(watch.rss) - before) / mib:.0f} MiB over the whole attack; chunks redone {found.reexecutions}"
        ),
        proves=(
            "a maximal body, four gzips inflating to 45 MB each at once, and 100,000-deep nesting on both body "
            "routes are refused with JSON 4xx/503 while a drain runs, without blocking the host or costing a "
            "chunk its visibility"
        ),
    )
