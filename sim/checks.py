"""The invariants checked once a run is quiet (see `sim.world`)."""

from __future__ import annotations

import json
from typing import Any

from shared.batch.results import newest
from shared.ops import reports
from shared.store.result_store import list_entries

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any


async def final_checks(self: World) -> None:
    """After the run: every accepted batch counted once and alike by the status route and the batch list, each
    item as its handler decided, and what every submit answered borne out by what is stored."""
    instance = self.live()[0]
    services = instance.services
    assert services is not None
    self.storage_weather.fault = lambda operation: None
    accepted = {
        name.split("/")[0]: json_of(blob.data)
        for name, blob in self.account.containers.get(self.settings.batches_container, {}).items()
        if name.endswith("/manifest.json") and json_of(blob.data).get("state") == "accepted"
    }
    self.accepted_items = sum(int(m["items"]) for m in accepted.values())
    statuses: dict[str, dict[str, Any]] = {}
    for batch_id, manifest in sorted(accepted.items()):
        status = await reports.read_batch_status(services, batch_id)
        statuses[batch_id] = status
        items = status["items"]
        if status["status"] not in ("completed", "completed_with_failures") or items["pending"]:
            self.violate(f"batch {batch_id[:8]} accepted but {status['status']} with {items['pending']} pending")
        entries = newest(await list_entries(services.storage.container(self.settings.results_container), batch_id))
        per_chunk: dict[int, int] = {}
        for e in entries:
            per_chunk[e.chunk] = per_chunk.get(e.chunk, 0) + e.ok + e.failed
        sizes = manifest.get("chunk_sizes")
        for chunk, settled in per_chunk.items():
            # Two copies of one chunk (a PutMessage applied whose answer was lost, retried by the SDK) each
            # record their outcomes: the counting rule clamps them, and the status route must count once.
            if sizes is not None and settled > sizes[chunk]:
                self.note(f"batch {batch_id[:8]} chunk {chunk}: {settled} outcomes recorded for {sizes[chunk]}")
        if items["succeeded"] + items["failed"] + items.get("discarded", 0) != int(manifest["items"]):
            self.violate(f"batch {batch_id[:8]}: the status route counts {items} for {manifest['items']} items")
        sub = self.labels.get(batch_id)
        if sub is not None:
            perm = sub.modes.count("perm")
            if items["failed"] < perm:
                self.violate(f"batch {batch_id[:8]}: {items['failed']} failed, but {perm} items always fail")
            if self.scenario.exact and (items["succeeded"], items["failed"]) != (sub.items - perm, perm):
                self.violate(
                    f"batch {batch_id[:8]} ({sub.label}): {items['succeeded']} ok / {items['failed']} "
                    f"failed, expected {sub.items - perm} / {perm} in a run without faults"
                )
    listed: dict[str, dict[str, Any]] = {}
    continuation = None
    while True:
        page = await reports.read_batch_page(services, 50, continuation)
        listed.update({b["batch_id"]: b for b in page["batches"]})
        continuation = page["continuation"]
        if not continuation:
            break
    for batch_id, status in statuses.items():
        row = listed.get(batch_id)
        if row is None:
            self.violate(f"batch {batch_id[:8]} accepted but missing from the batch list")
        elif row["items"] != status["items"]:
            self.violate(f"batch {batch_id[:8]}: the list says {row['items']}, the status route {status['items']}")
    for batch_id, answered in self.answers.items():
        if 202 in answered or not answered:
            continue
        if batch_id in accepted and all(s >= 500 for s in answered) and len(answered) == tries(self, batch_id):
            self.violate(f"batch {batch_id[:8]}: every submit answered {answered}, yet it is accepted")
    for batch_id, sub in self.labels.items():
        if 202 in self.answers.get(batch_id, []) and batch_id not in accepted:
            self.violate(f"batch {batch_id[:8]} ({sub.label}) answered 202 but its manifest is not accepted")


def tries(self: World, batch_id: str) -> int:
    sub = self.labels.get(batch_id)
    return 0 if sub is None else 1 + sub.retries


def json_of(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    return doc if isinstance(doc, dict) else {}
