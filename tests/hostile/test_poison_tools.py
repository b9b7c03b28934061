"""Operators list, inspect and replay parked chunks with `python -m shared.cli poison ...` (its own process)
over the function-level HTTP routes of the real app in the local host; replaying twice runs the items once."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.faults.stack import wait_until
from tests.hostile.cases import NDJSON
from tests.hostile.conftest import HostileStack, wait_status

pytestmark = pytest.mark.hostile

FRAGILE = (3, 13, 23)


ITEMS = 501  # two chunks (the stack's CHUNK_MAX_ITEMS is 500): the second, one held item, keeps it processing


def submit_with_fragile_items(hostile: HostileStack, token: str) -> str:
    # Failing for good at once, they park while the held chunk is still in the handler (a retry would wait for it).
    items = [{"id": f"{token}-{n}", **({"fragile": "permanent"} if n in FRAGILE else {})} for n in range(ITEMS - 1)]
    items.append({"id": f"{token}-{ITEMS - 1}", "held": True})
    body = "\n".join(json.dumps(i) for i in items).encode()
    reply = hostile.request("POST", "/api/batches", body, NDJSON)
    assert reply.status == 202, reply.body[:300]
    batch_id: str = reply.json()["batch_id"]
    return batch_id


def wait_failed(hostile: HostileStack, batch_id: str, failed: int, timeout_s: float = 90) -> dict[str, Any]:
    """The batch status once `failed` of its items are recorded failed (read over the API)."""

    def reached() -> dict[str, Any] | None:
        reply = hostile.request("GET", f"/api/batches/{batch_id}")
        status: dict[str, Any] | None = reply.json() if reply.status == 200 else None
        return status if status and status["items"]["failed"] == failed else None

    return wait_until(reached, timeout_s, f"{failed} items of batch {batch_id} to be parked", every_s=0.5)


def replay_output(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replayed "), done.stdout
    return int(done.stdout.split()[1])


def test_parked_chunks_are_listed_inspected_and_replayed_once_by_the_cli(hostile: HostileStack) -> None:
    token = uuid.uuid4().hex[:8]
    fragile_ids = {f"{token}-{n}" for n in FRAGILE}
    held = hostile.broken_flag.with_name(hostile.broken_flag.name + ".held")
    hostile.broken_flag.touch()
    held.touch()
    try:
        batch_id = submit_with_fragile_items(hostile, token)
        parked = wait_failed(hostile, batch_id, len(FRAGILE))
    finally:
        hostile.broken_flag.unlink()  # the cause is fixed before anything is replayed
    assert parked["status"] == "processing", parked

    listing = hostile.cli("poison", "list")
    assert listing.returncode == 0, listing.stderr
    [partition] = json.loads(listing.stdout)["partitions"]
    mine = [p for p in partition["first"] if p["batch_id"] == batch_id]
    assert mine, partition
    assert all(p["replayable"] for p in mine), mine
    assert all("broken dependency" in p["reason"] for p in mine), mine
    assert sum(p["failed"] for p in mine) == len(FRAGILE)

    shown = hostile.cli("poison", "show", mine[0]["message_id"])
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["batch_id"] == batch_id
    assert {i["id"] for i in detail["items"]} <= fragile_ids
    assert all(i["fragile"] == "permanent" for i in detail["items"])

    before = hostile.executions()
    # Two operators replay at the same moment, then one more time: each parked chunk goes back once.
    first = sum(replay_output(r) for r in hostile.cli_together(2, "poison", "replay", "--batch", batch_id))
    assert first == len(mine)
    assert replay_output(hostile.cli("poison", "replay", "--batch", batch_id)) == 0
    held.unlink()

    status = wait_status(hostile, batch_id, {"completed"})
    assert status["items"] == {"total": ITEMS, "succeeded": ITEMS, "failed": 0, "pending": 0}
    after = hostile.executions()
    assert {i: after[i] - before[i] for i in fragile_ids} == dict.fromkeys(fragile_ids, 1)
    assert all(after[f"{token}-{n}"] == 1 for n in range(ITEMS) if n not in FRAGILE), "the others never ran again"
    final = hostile.cli("poison", "replay", "--batch", batch_id)
    assert final.returncode == 1, (final.stdout, final.stderr)
    assert "is final" in final.stderr, final.stderr

    listed_after = json.loads(hostile.cli("poison", "list").stdout)
    assert not [p for p in listed_after["partitions"][0]["first"] if p["batch_id"] == batch_id]


def test_showing_an_unknown_parked_chunk_is_exit_code_1_with_the_reason(hostile: HostileStack) -> None:
    done = hostile.cli("poison", "show", "no-such-message")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: 404: no parked chunk with message id no-such-message"
