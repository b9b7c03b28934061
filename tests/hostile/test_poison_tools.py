"""Operators list, inspect and replay parked chunks with `python -m shared.cli poison ...` (its own process)
over the function-level HTTP routes of the real app in the local host; replaying twice runs the items once."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.hostile.cases import NDJSON
from tests.hostile.conftest import HostileStack, wait_status

pytestmark = pytest.mark.hostile

FRAGILE = (3, 13, 23)


def submit_with_fragile_items(hostile: HostileStack, token: str) -> str:
    items = [{"id": f"{token}-{n}", **({"fragile": True} if n in FRAGILE else {})} for n in range(30)]
    body = "\n".join(json.dumps(i) for i in items).encode()
    reply = hostile.request("POST", "/api/batches", body, NDJSON)
    assert reply.status == 202, reply.body[:300]
    batch_id: str = reply.json()["batch_id"]
    return batch_id


def replay_output(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replayed "), done.stdout
    return int(done.stdout.split()[1])


def test_parked_chunks_are_listed_inspected_and_replayed_once_by_the_cli(hostile: HostileStack) -> None:
    token = uuid.uuid4().hex[:8]
    fragile_ids = {f"{token}-{n}" for n in FRAGILE}
    hostile.broken_flag.touch()
    try:
        batch_id = submit_with_fragile_items(hostile, token)
        parked = wait_status(hostile, batch_id, {"completed_with_failures"})
    finally:
        hostile.broken_flag.unlink()  # the cause is fixed before anything is replayed
    assert parked["items"]["failed"] == len(FRAGILE)

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
    assert all(i["fragile"] is True for i in detail["items"])

    before = hostile.executions()
    # Two operators replay at the same moment, then one more time: each parked chunk goes back once.
    first = sum(replay_output(r) for r in hostile.cli_together(2, "poison", "replay", "--batch", batch_id))
    assert first == len(mine)
    assert replay_output(hostile.cli("poison", "replay", "--batch", batch_id)) == 0

    status = wait_status(hostile, batch_id, {"completed"})
    assert status["items"] == {"total": 30, "succeeded": 30, "failed": 0, "pending": 0}
    after = hostile.executions()
    assert {i: after[i] - before[i] for i in fragile_ids} == dict.fromkeys(fragile_ids, 1)
    assert all(after[f"{token}-{n}"] == 1 for n in range(30) if n not in FRAGILE), "the others never ran again"

    listed_after = json.loads(hostile.cli("poison", "list").stdout)
    assert not [p for p in listed_after["partitions"][0]["first"] if p["batch_id"] == batch_id]


def test_showing_an_unknown_parked_chunk_is_exit_code_1_with_the_reason(hostile: HostileStack) -> None:
    done = hostile.cli("poison", "show", "no-such-message")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: 404: no parked chunk with message id no-such-message"
