"""A handler that fails some items always and others transiently, in the real host.

Transient failures succeed on retry; items that always fail reach the poison queue after
MAX_DEQUEUE_COUNT attempts with their reason, permanent ones at once; every other item of each
chunk succeeds the first time and is never redone.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.faults.audit import audit
from tests.faults.conftest import Recorder, StartStack
from tests.faults.stack import Stack

pytestmark = pytest.mark.faults

ITEMS = 2_000
CHUNK_ITEMS = 100
MAX_ATTEMPTS = 3


def kind(n: int) -> str | None:
    if n % 97 == 5:
        return "permanent"
    if n % 41 == 3:
        return "always"
    if n % 9 == 1:
        return "transient"
    return None


def poison_messages(stack: Stack) -> list[dict[str, Any]]:
    """Every message of the poison queue (peek stops at 32): received, and hidden for the rest of the test."""
    with stack.queue(f"{stack.work_queue}-poison") as client:
        return [json.loads(m.content) for m in client.receive_messages(messages_per_page=32, visibility_timeout=600)]


@pytest.mark.timeout(180)
def test_transient_failures_succeed_on_retry_and_permanent_ones_are_parked_with_their_reason(
    start_stack: StartStack, reliability: Recorder
) -> None:
    stack = start_stack(
        {
            "MAX_DEQUEUE_COUNT": str(MAX_ATTEMPTS),
            "RETRY_BASE_DELAY_MS": "300",
            "RETRY_MAX_DELAY_MS": "1000",
            "CHUNK_MAX_ITEMS": str(CHUNK_ITEMS),
        }
    )
    items = [{"id": f"{stack.token}-{n}", **({"fail": kind(n)} if kind(n) else {})} for n in range(ITEMS)]
    by_kind = {k: [i["id"] for i in items if i.get("fail") == k] for k in ("transient", "always", "permanent")}
    started = time.monotonic()
    batch_id = stack.submit(items)["batch_id"]
    status = stack.wait_completed(batch_id, timeout_s=120)
    settled_s = time.monotonic() - started
    found = audit(stack, batch_id, items, CHUNK_ITEMS)
    parked = len(by_kind["always"]) + len(by_kind["permanent"])

    assert status["status"] == "completed_with_failures", status
    assert status["items"] == {"total": ITEMS, "succeeded": ITEMS - parked, "failed": parked, "pending": 0}
    assert (found.lost, found.duplicated) == (0, 0), found

    runs = stack.executions()
    assert all(runs[i] == 2 for i in by_kind["transient"]), "a transient failure succeeds on its one retry"
    assert all(runs[i] == MAX_ATTEMPTS for i in by_kind["always"]), "retried until MAX_DEQUEUE_COUNT, no further"
    assert all(runs[i] == 1 for i in by_kind["permanent"]), "a permanent failure is never retried"
    failing = set().union(*by_kind.values())
    assert all(runs[i["id"]] == 1 for i in items if i["id"] not in failing), "the rest of each chunk is done once"

    messages = poison_messages(stack)
    assert sum(m["poison"]["failed"] for m in messages) == parked
    reasons = " | ".join(m["poison"]["reason"] for m in messages)
    assert f"failed {MAX_ATTEMPTS} times (MAX_DEQUEUE_COUNT {MAX_ATTEMPTS}); last: item" in reasons
    assert "keeps failing" in reasons
    assert "is invalid (permanent)" in reasons
    parked_ids = {item["id"] for m in messages for item in (m["chunk"].get("items") or []) if isinstance(item, dict)}
    assert parked_ids == set(by_kind["always"]) | set(by_kind["permanent"]), "the parked chunks carry exactly them"

    reliability.record(
        "4. handler fails items always / transiently",
        found,
        tries=len(by_kind["transient"]) + parked,
        recover_s=f"{settled_s:.0f} s to settle the batch (retries included)",
        proves="only failed items are retried; the poison queue holds exactly the failing ones, with reasons",
    )
