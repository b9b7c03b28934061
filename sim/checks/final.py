"""The invariants checked once a run is quiet (see `sim.world`)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from shared.core import layout
from shared.ops import lifecycle, reports
from shared.ops.status import FINAL
from sim.checks import cost_promises, promises, replays

# What the batch list shows of a batch stamped final (docs/api.md): these as they are, any other final status
# (`cancelled`, `failed`, `expired`) as `ended`.
LISTED = {"completed": "completed", "completed_with_failures": "completed_with_failures"}
VOLUME_TX_PER_1000 = 30.0  # see transactions_bounded
VOLUME_TX_PER_RUN = 100  # what a run pays whatever its items (see transactions_bounded)

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
        self.answered_final.after_run(batch_id, status)
        items = status["items"]
        ended = manifest.get("ended")  # cancelled (`sim.checks.invariants.Cancels`): its unhandled items end cancelled
        finals = ("completed", "completed_with_failures") + ((ended,) if ended else ())
        # A batch that asked for a deadline may end expired, one with a tolerance failed (`shared.batch.lifecycle`).
        finals += ("expired",) * bool(manifest.get("expires_at")) + ("failed",) * (
            manifest.get("max_failed_fraction") is not None
        )
        if status["status"] not in finals or items["pending"]:
            self.violate(f"batch {batch_id[:8]} accepted but {status['status']} with {items['pending']} pending")
        replays.never_stranded(self, batch_id)
        if cost_promises.apart_reads(self, batch_id):
            self.features.add("apart")  # a chunk two copies recorded apart, counted by position (`sim.copies`)
        counted = sum(items.get(k, 0) for k in ("succeeded", "failed", "discarded", "cancelled", "expired"))
        if counted != int(manifest["items"]):
            self.violate(f"batch {batch_id[:8]}: the status route counts {items} for {manifest['items']} items")
        if status["status"] in FINAL:
            lines = await export_agrees(self, services, batch_id, status)
            promises.after_run(self, batch_id, manifest, status, lines)
        sub = self.labels.get(batch_id)
        if sub is not None and not ended and status["status"] in ("completed", "completed_with_failures"):
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
        elif row["items"] != {k: status["items"].get(k) for k in row["items"]}:
            # The list counts what was never run of an ended batch only as not pending (`shared.ops.progress`).
            self.violate(f"batch {batch_id[:8]}: the list says {row['items']}, the status route {status['items']}")
        elif (stamp := final_stamp(self, batch_id)) is not None and row["status"] != LISTED.get(stamp, "ended"):
            # A cancel that read the batch before its last record and ended it after: stamped `cancelled` though
            # every item succeeded (lifecycle seed 601), the list must not say `completed` (docs/api.md).
            self.violate(f"batch {batch_id[:8]} stamped {stamp}, but the batch list says {row['status']}")
    for batch_id, answered in self.answers.items():
        if 202 in answered or not answered:
            continue
        if batch_id in accepted and all(s >= 500 for s in answered) and len(answered) == tries(self, batch_id):
            self.violate(f"batch {batch_id[:8]}: every submit answered {answered}, yet it is accepted")
    for batch_id, sub in self.labels.items():
        if 202 in self.answers.get(batch_id, []) and batch_id not in accepted:
            self.violate(f"batch {batch_id[:8]} ({sub.label}) answered 202 but its manifest is not accepted")
    transactions_bounded(self)
    promises.idle_cost(self)


async def export_agrees(self: World, services: Any, batch_id: str, status: dict[str, Any]) -> list[dict[str, Any]]:
    """The results export (`shared.ops.lifecycle.export`) of a final batch: one line per item, positions 0 to
    items - 1 once each, as many of each status as the status route counts."""
    manifest, _, entries = await lifecycle.read(services, batch_id)
    lines = [line async for line in lifecycle.export(services, manifest, entries, status=None, start=0,
                                                     limit=manifest.items + 1)]  # fmt: skip
    positions = sorted(line["position"] for line in lines)
    if positions != list(range(manifest.items)):
        self.violate(f"batch {batch_id[:8]}: the export has positions {positions[:20]} for {manifest.items} items")
    by_status = Counter(line["status"] for line in lines)
    items = status["items"]
    for kind in lifecycle.STATUSES:
        if by_status.get(kind, 0) != items.get(kind, 0):
            self.violate(f"batch {batch_id[:8]}: the export has {dict(by_status)}, the status route {items}")
            break
    return lines


def transactions_bounded(self: World) -> None:
    """A `volume` run (no faults, default chunk size, one lane): storage transactions within VOLUME_TX_PER_RUN plus
    VOLUME_TX_PER_1000 per 1,000 items. README's 9.00 per 1,000 items is a 200,000-item backlog at the default
    settings: about 2 a chunk of 250 (its PutMessage and DeleteMessage, its share of a page and of a result blob),
    the rest spread thin. These runs hold 10,000-140,000 items (2-7 batches of 5,000-20,000) under drawn settings,
    and pay what does not grow with their items: up to 3 instances each creating its containers and queues, a
    lease and a lane listing per drain session, looks at a 5 s floor, and, with a handler limit set, every leasing
    drainer's count of its claim each second (`shared.engine.limits`). Measured (seeds 0-59): 16-28 per 1,000
    items, but 33.9 for seed 26, the smallest draw (10,000 items) with the costliest settings (3 instances, 2
    partitions, 3 drainers each, HANDLER_MAX_IN_FLIGHT 2): 339 transactions, about 100 of them by its 40 chunks and
    240 by the run (creates 21, the limit's counts 58, leases 24, looks 30, lane listings and marks 50); the same
    seed cost 34.3 when the bound came in (91a5bd2), so no regression. A defect costing one transaction more per
    chunk adds 4 per 1,000 items, per item 1,000."""
    if self.scenario.family != "volume" or not self.accepted_items:
        return
    per_1000 = (self.run_transactions - VOLUME_TX_PER_RUN) / self.accepted_items * 1000
    if per_1000 > VOLUME_TX_PER_1000:
        self.violate(
            f"{per_1000:.1f} storage transactions per 1,000 items past the run's own {VOLUME_TX_PER_RUN} "
            f"(bound {VOLUME_TX_PER_1000}; {self.run_transactions} for {self.accepted_items} items)"
        )


def final_stamp(self: World, batch_id: str) -> str | None:
    """The batch's `final_status` as its manifest stands now (the status reads above stamped what was final)."""
    blob = self.account.containers[self.settings.batches_container][layout.manifest_blob(batch_id)]
    stamp = json_of(blob.data).get("final_status")
    return stamp if isinstance(stamp, str) else None


def tries(self: World, batch_id: str) -> int:
    sub = self.labels.get(batch_id)
    return 0 if sub is None else 1 + sub.retries


def json_of(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    return doc if isinstance(doc, dict) else {}
