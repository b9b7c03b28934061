"""What users are promised, checked in every run (issue 37 item 2; RELIABILITY.md, "The simulation"). The world
(`sim.world`) is passed in; `watch` runs beside the run, `after_run` once it is quiet (from `sim.checks.final`).

*Outcomes as returned.* The world's handler decides each item from the item itself and counts its returns per
item (`World.item_calls`): an `ok` item returns success at every call, `perm` a permanent failure, `tN` a
retryable failure at its first N calls and success after. So, for every final batch: an item the export lists
`succeeded` was returned a success (and its value is the handler's, the item's position); one it lists `failed`
for the handler's reason was returned that failure; no result record (any attempt, any generation, superseded or
not) holds an item as ok or failed that the handler never returned so. Each item once in the export, with the
status route's counts, is `sim.checks.final.export_agrees`.

*Discards.* An item ends `cancelled` or `expired` only if no result record ever held an outcome for it: an
outcome once recorded is never replaced by a discard (issue 36 item 2).

*Records.* No chunk has more items recorded than it holds: every position any record of a chunk holds settled
(ok, failed, cancelled, expired) lies inside that chunk. Counted by position, not by the records' counts: two
copies of one chunk (a PutMessage applied whose answer was lost, retried by the SDK) each record the same
positions, which the status route counts once (this was a trace note, "N outcomes recorded", that could not fail).

*Stamps.* A batch's final status, once stamped in its manifest (`final_status`), never changes, and the status
route says the same after the run (a replay included, issue 36 item 12).

*Tolerance.* A batch with `max_failed_fraction` never ends `completed` or `completed_with_failures` past it.

*Liveness.* Every chunk message is gone from the work queues within `settle_bound_s` of the last fault, not an
hour. A trigger message Service Bus lost and a handler call that hangs (until `functionTimeout`, when its worker
restarts) are faults too. The bound: the look bound counted from then (with the timer's period where a fault may
have lost a chain before), a visibility timeout for a message a crashed drainer hid, the retries of an item's
attempts, and the handler's own time as if every call of the run waited for every other.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.batch.lifecycle import tripped
from shared.ops.notices import STALL_S, notice_blob
from sim.clock import EPOCH_S
from sim.heard import heard
from sim.host import FUNCTION_TIMEOUT_S

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

IDLE_PER_PARTITION = 2  # README, idle storage transactions per queue: a lane listing and the quiet record per tick
# The notice sweep's index listing (issue 36 item 3), the replay notes' listing (`shared.ops.replay_takeover`), and
# one more (measured 0.6 a tick).
IDLE_PER_TICK = 3
IDLE_PER_LANE_DAY = 1  # README: an idle tenant lane costs one storage transaction a day (the day's depth read)
IDLE_SLACK_PER_H = 4.0
COMPLETED = ("completed", "completed_with_failures")
HANDLER_REASONS = ("permanent", "transient")  # `sim.host.SimHandler`'s failure reasons
API_LOGGER = "shared.api"  # where `shared.api.answer` logs an unhandled error
RESTART_S = 5.0  # the world restarts a worker that outlived functionTimeout after this long
IDLE_WATCH_S = 5.0  # the watch's period while no chunk message is queued (the idle family's hours)


def settle_bound_s(world: World) -> float:
    """How long after the last fault every chunk message may still be queued (see the module docstring)."""
    scenario, settings = world.scenario, world.settings
    bound = world.looks.bound_after(scenario.fault_end_s)
    if (scenario.bus_spans or scenario.crashes) and not (scenario.bus_lose or scenario.handler_hang):
        bound += scenario.timer_s  # a chain lost before the last fault waits for the timer (`Looks`)
    bound += settings.visibility_timeout_s
    bound += settings.max_dequeue_count * (settings.retry_max_delay_ms / 1000 + settings.visibility_timeout_s)
    # The handler's own time, as if every chunk of the run waited for every other (slow sync handlers).
    chunks = sum(-(-sub.items // settings.chunk_max_items) for sub in scenario.submits)
    bound += chunks * settings.max_dequeue_count * scenario.handler_s[1]
    return float(bound)


def last_fault_s(world: World, lost_at: float) -> float:
    """When the last fault ended: the scenario's last; the end of the last handler call that hung (a call hangs
    until `functionTimeout`, and its worker restarts); the last trigger message Service Bus lost (`lost_at`)."""
    hung = [at + FUNCTION_TIMEOUT_S + RESTART_S for _, at in world.hangs]
    return float(max([world.scenario.fault_end_s, lost_at, *hung]))


class Promises:
    """The checks that run beside a run (stamps, liveness); `after_run` holds the rest."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.stamps: dict[str, str] = {}  # batch id -> the final status first stamped
        self.seen: dict[str, bytes] = {}  # manifest blob -> the data last read (read again only when it changes)
        self.lost_at = 0.0  # when Service Bus last lost a trigger message (sampled each second)

    async def watch(self) -> None:
        world = self.world
        bound = settle_bound_s(world)
        late = False
        lost = 0
        left = 1
        while True:
            await asyncio.sleep(1.0 if left else IDLE_WATCH_S)
            self.check_stamps()
            now = world.now_s()
            if world.broker.lost > lost:  # sampled every second: lost within the last one
                lost, self.lost_at = world.broker.lost, now
            end = last_fault_s(world, self.lost_at)
            if now < end:
                continue
            left = chunks_left(world)
            if left and now - end > bound and not late:
                late = True
                world.violate(
                    f"{left} chunk message(s) still queued {now - end:.0f} s after the last fault (bound {bound:.0f} s)"
                )

    def check_stamps(self) -> None:
        world = self.world
        for name, blob in world.account.containers.get(world.settings.batches_container, {}).items():
            if not name.endswith("/manifest.json") or self.seen.get(name) is blob.data:
                continue
            self.seen[name] = blob.data
            stamp = _json(blob.data).get("final_status")
            batch_id = name.split("/")[0]
            first = self.stamps.setdefault(batch_id, stamp) if stamp is not None else self.stamps.get(batch_id)
            if first is not None and stamp != first:
                world.violate(f"batch {batch_id[:8]}'s final status, stamped {first}, is now {stamp}")
                self.stamps[batch_id] = stamp or first


def chunks_left(world: World) -> int:
    """Chunk messages in the work queues (poison queues apart)."""
    queues = world.account.queues
    return sum(
        len(q.messages) for name, q in queues.items() if name.startswith("work") and not name.endswith("-poison")
    )


def after_run(world: World, batch_id: str, manifest: dict[str, Any], status: dict[str, Any],
              lines: list[dict[str, Any]]) -> None:  # fmt: skip
    """The promises about one batch once the run is quiet: its stamp, its outcomes, its discards, its records."""
    stamp = manifest.get("final_status")
    if stamp is not None and stamp != status["status"]:
        world.violate(f"batch {batch_id[:8]} is stamped {stamp}, the status route says {status['status']}")
    tolerated(world, batch_id, manifest, status)
    records = list(records_of(world, batch_id))
    sizes = manifest.get("chunk_sizes")
    if sizes is None:
        return
    starts = [sum(sizes[:c]) for c in range(len(sizes))]
    records_within_chunks(world, batch_id, sizes, records)
    records = [_absolute(r, starts) for r in records if 0 <= r.get("chunk", -1) < len(sizes)]
    outcomes_as_returned(world, batch_id, lines, records)
    discards_only_unrun(world, batch_id, lines, records)
    notices_delivered(world, batch_id, manifest, status)


def tolerated(world: World, batch_id: str, manifest: dict[str, Any], status: dict[str, Any]) -> None:
    """A batch with `max_failed_fraction` f never ends `completed` or `completed_with_failures` with more than f of
    its items failed (it ends `failed`; issue 36 item 7)."""
    fraction = manifest.get("max_failed_fraction")
    failed = status["items"].get("failed", 0)
    if fraction is not None and status["status"] in COMPLETED and tripped(failed, int(manifest["items"]), fraction):
        world.violate(
            f"batch {batch_id[:8]} ended {status['status']} with {failed} of {manifest['items']} items failed, past "
            f"its max_failed_fraction {fraction}"
        )


def notices_delivered(world: World, batch_id: str, manifest: dict[str, Any], status: dict[str, Any]) -> None:
    """A final batch that named a callback: every notice the receiver processed has a valid signature and states
    the batch's final status; at least one came, within `notice_bound_s` of the later of the batch's stamp and the
    last fault of the run or of the receiver, unless the receiver was at fault after the batch was stamped, or its
    window (CALLBACK_WINDOW_S) ended within that bound and at least one attempt was POSTed: the notice may then be
    given up at its deadline. The batch is final from its stamp, or from when its notice was stored if earlier."""
    receiver = getattr(world, "receiver", None)
    if receiver is None or not manifest.get("callback_url"):
        return
    got = [r for r in receiver.received if r.batch_id == batch_id]
    for r in got:
        if not r.valid or r.status != status["status"]:
            world.violate(
                f"batch {batch_id[:8]} is {status['status']}, but a completion notice at {r.at_s:.0f} s says "
                f"{r.status} (signature {'valid' if r.valid else 'invalid'})"
            )
            return
    stamped = manifest.get("finished_at")
    final_s = datetime.fromisoformat(stamped).timestamp() - EPOCH_S if stamped else world.now_s()
    blob = world.account.containers.get(world.settings.state_container, {}).get(notice_blob(batch_id))
    notice = _json(blob.data) if blob is not None else {}
    if notice:  # stored after its stamp (lifecycle seed 601); one stored before it would count from then
        final_s = min(final_s, float(notice["created_s"]) - EPOCH_S)
    spans = getattr(world.scenario, "receiver", [])
    if any(span.end_s > final_s for span in spans):
        return  # the receiver was down, slow or failing since: a notice may be given up at its deadline
    lost_at = getattr(getattr(world, "promises", None), "lost_at", 0.0)  # a lost notice event waits for the timer
    due = max([final_s, last_fault_s(world, lost_at), *(span.end_s for span in spans)]) + notice_bound_s(world)
    first = min((r.at_s for r in got), default=None)
    posted = any(p.batch_id == batch_id for p in getattr(receiver, "posts", []))
    if notice.get("state") == "failed" and float(notice["deadline_s"]) - EPOCH_S < due and posted:
        return  # its window ended within the bound (a short CALLBACK_WINDOW_S): given up after an attempt
    if first is None or first > due:
        when = "never" if first is None else f"only at {first:.0f} s"
        world.violate(
            f"batch {batch_id[:8]} is {status['status']}: its completion notice came {when} (due {due:.0f} s)"
        )


def notice_bound_s(world: World) -> float:
    """How long a notice may take once its batch is final and nothing is at fault: the timer's sweep (a notice
    whose event was lost, or a final batch without its notice), a stalled notice's grace, one attempt's timeout
    and the longest retry delay."""
    settings = world.settings
    return float(world.scenario.timer_s + STALL_S + settings.callback_timeout_s + settings.callback_retry_max_s)


def outcomes_as_returned(world: World, batch_id: str, lines: list[dict[str, Any]],
                         records: list[dict[str, Any]]) -> None:  # fmt: skip
    sub = world.labels.get(batch_id)
    if sub is None:  # no answer named the batch: its items cannot be told from the handler's count
        return
    returned = {p: _returned(world, sub, p) for p in range(sub.items)}
    for line in lines:
        p, kind = line["position"], line["status"]
        if kind == "succeeded" and ("ok" not in returned[p] or line.get("value") != p):
            world.violate(
                f"batch {batch_id[:8]} item {p}: exported succeeded with value {line.get('value')!r}, but the "
                f"handler returned {sorted(returned[p]) or 'nothing'} for it"
            )
            break
        if kind == "failed" and _handler_reason(line.get("reason")) not in returned[p] | {None}:
            world.violate(
                f"batch {batch_id[:8]} item {p}: exported failed ({line.get('reason')}), but the handler returned "
                f"{sorted(returned[p]) or 'nothing'} for it"
            )
            break
    for record in records:
        held: list[tuple[int, str | None]] = [(p, "ok") for p in record.get("ok") or []]
        held += [(f["i"], _handler_reason(f.get("reason"))) for f in record.get("failed") or []]
        for p, kind in held:
            if kind is not None and 0 <= p < sub.items and kind not in returned[p]:
                world.violate(
                    f"batch {batch_id[:8]} item {p}: a record (chunk {record.get('chunk')}, attempt "
                    f"{record.get('attempt')}) holds it {kind}, but the handler returned "
                    f"{sorted(returned[p]) or 'nothing'} for it"
                )
                return


def discards_only_unrun(world: World, batch_id: str, lines: list[dict[str, Any]],
                        records: list[dict[str, Any]]) -> None:  # fmt: skip
    recorded: set[int] = set()
    for record in records:
        recorded.update(record.get("ok") or [])
        recorded.update(f["i"] for f in record.get("failed") or [])
    for line in lines:
        if line["status"] in ("cancelled", "expired") and line["position"] in recorded:
            world.violate(
                f"batch {batch_id[:8]} item {line['position']} ends {line['status']}, but an outcome was recorded "
                "for it (a discard replaced it)"
            )
            return


def records_within_chunks(world: World, batch_id: str, sizes: list[int], records: list[dict[str, Any]]) -> None:
    """Positions in a record are the chunk's own (0 to its size - 1)."""
    for chunk, size in enumerate(sizes):
        held = [p for r in records if r.get("chunk") == chunk for p in _settled(r)]
        outside = sorted({p for p in held if not 0 <= p < size})
        if outside:
            world.violate(
                f"batch {batch_id[:8]} chunk {chunk}: records hold {len(set(held))} items for its {size}, "
                f"{outside[:5]} outside it"
            )
            return


def idle_cost(world: World) -> None:
    """Over every idle stretch of the run (`scenario.idle`: nothing submitted, nothing at fault), from a timer
    period after it begins (the last wave's looks and sessions die down), storage transactions per hour within the
    README's budget for an idle app: per timer tick, a lane listing and the lanes' quiet record per partition,
    the notice sweep's index listing, the replay notes' listing and one more call; and one transaction per lane a
    day, its depth read by the day's thorough look (the shipped timer ticks every 6 hours, this world's every
    hour: the per-tick costs scale). The stretch's first tick is that thorough look, so it is left out; a thorough
    look at a later tick (d429839 put back: `lane-depths-every-tick`) costs a read per lane and fails the budget."""
    log = getattr(world, "storage_log", None)
    if log is None:
        return
    scenario, settings = world.scenario, world.settings
    lanes = sum(1 for name in world.account.queues if name.startswith("work") and not name.endswith("-poison"))
    per_tick = IDLE_PER_PARTITION * len(settings.partition_queues()) + IDLE_PER_TICK
    budget = 3600.0 / scenario.timer_s * per_tick + lanes * IDLE_PER_LANE_DAY / 24 + IDLE_SLACK_PER_H
    for span in getattr(scenario, "idle", []):
        start, end = span.start_s + scenario.timer_s, span.end_s
        if end - start < scenario.timer_s:
            continue
        spent = sum(1 for at, _ in log if start <= at < end)
        per_h = spent / (end - start) * 3600
        if per_h > budget:
            world.violate(
                f"{per_h:.1f} storage transactions an hour while idle from {start:.0f} s to {end:.0f} s "
                f"(budget {budget:.1f}: {len(settings.partition_queues())} partition(s), {lanes} lane(s))"
            )


def records_of(world: World, batch_id: str) -> Iterable[dict[str, Any]]:
    """Every result record of the batch ever written and still stored (superseded ones too)."""
    for name, blob in world.account.containers.get(world.settings.results_container, {}).items():
        if name.startswith(f"{batch_id}/") and name.endswith(".json"):
            doc = _json(blob.data)
            yield from doc.get("records") or ([doc] if "ok" in doc else [])


def _returned(world: World, sub: Any, position: int) -> set[str]:
    """What the handler returned for an item at least once: "ok", "permanent", "transient"."""
    calls = world.item_calls.get(f"{sub.label}/{position}", 0)
    mode = sub.modes[position]
    if not calls:
        return set()
    if mode == "ok":
        return {"ok"}
    if mode == "perm":
        return {"permanent"}
    retried = int(mode[1:])
    return {"transient"} | ({"ok"} if calls > retried else set())


def _handler_reason(reason: Any) -> str | None:
    """The handler's failure a record's reason names, or None for a failure the app decided (a chunk parked
    whole, a message it could not read)."""
    text = str(reason or "")
    for name in HANDLER_REASONS:
        if text == name or text.endswith(f"last: {name}"):
            return name
    return None


def _absolute(record: dict[str, Any], starts: list[int]) -> dict[str, Any]:
    """The record with its items' positions in the batch (a record holds its chunk's own)."""
    at = starts[record["chunk"]]
    out = dict(record)
    for kind in ("ok", "cancelled", "expired"):
        out[kind] = [at + p for p in record.get(kind) or []]
    out["failed"] = [f | {"i": at + f["i"]} for f in record.get("failed") or []]
    return out


def _settled(record: dict[str, Any]) -> list[int]:
    held = list(record.get("ok") or []) + [f["i"] for f in record.get("failed") or []]
    return held + list(record.get("cancelled") or []) + list(record.get("expired") or [])


def _json(data: bytes) -> dict[str, Any]:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class _Incidents(logging.Handler):
    """Every unhandled error the API's error mapping logs (`shared.api.answer`: a 500 with an incident id)."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.ERROR)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        detail = f": {type(error).__name__}: {str(error)[:120]}" if error is not None else ""
        self.world.violate(f"an API call answered 500, {record.getMessage()}{detail}")


@contextmanager
def incidents_watched(world: World) -> Iterator[None]:
    """For one run (entered by `held_watched`): no API call ends in an unhandled error (a 500). A run whose
    submits all answered 500 accepted nothing, and every other check passed it (issue 39's caller lookup read the
    process's environment, not the world's settings)."""
    with heard(API_LOGGER, logging.ERROR, _Incidents(world)):
        yield
