"""A background replay step writes what it took as it goes, so a step killed mid-step loses no account of it.

Before each group of GROUP parked chunks a step writes the job (`shared.ops.replay_jobs`, with the blob's ETag):
the counts of every chunk it took before the group, and the group's message ids (`in_hand`). A step that dies
leaves at most one group unwritten, named by `in_hand`; the next step, as it claims the job, reads each of those
chunks' index entries: a chunk no longer parked was taken by the dead step and is counted (set aside when its
set-aside record is there, replayed otherwise), one still parked is left to the step's own replay, which counts it
once it takes it. Cost: one blob write per GROUP chunks a step takes (the writes of a step that takes fewer are
its end's write alone), and at the start of a step after a dead one, one index read per chunk in its hand (GROUP
at most) and one set-aside read per chunk gone, counted in the step's time bound (STEP_S).

A write that meets another's (a step whose claim lapsed while it ran, and the step that claimed the job then)
reads the job again and adds only what it took since its last write, leaving out the chunks the claiming step
counted for it (`recovered`); it then stops taking chunks (`StepTaken`). Counts only grow: an outcome once
recorded never changes, and no chunk is counted by both.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import PreconditionFailed, ResourceConflict
from shared.ops.replay import Taken
from shared.store import poison_index
from shared.store.storage import read_json, write_json

log = logging.getLogger(__name__)

GROUP = 5  # chunks a step takes between two writes of its job
SKIPPED_SHOWN = 20  # the first chunks left parked, with why, a job shows
RECOVERED_KEPT = 100  # the last chunks a claiming step counted for a dead one, kept so a late write leaves them out
MERGES = 5  # a write re-reads the job at most this many times when another's write came between


class StepTaken(Exception):
    """Another step claimed the job while this one ran: this one stops taking chunks (what it took is counted)."""


class Journal:
    """One step's writes of its job (`doc`, the job's JSON as the step last wrote it, with its ETag)."""

    def __init__(self, state: ContainerClient, blob: str, doc: dict[str, Any], etag: str) -> None:
        self.state, self.blob, self.doc, self.etag = state, blob, doc, etag
        self.step_id = str(doc.get("step_id", ""))
        self.taken = Taken()
        self.written = (0, 0, 0)  # how much of `taken` (replayed, set aside, skipped) is in `doc`
        self.lost = False
        self.group = GROUP

    async def taking(self, poison_queue: str, message_ids: list[str]) -> None:
        """Before a group: what was taken so far, and the group in hand."""
        await self.write({"in_hand": message_ids, "in_hand_queue": poison_queue})
        if self.lost:
            raise StepTaken(f"replay job {self.doc.get('job_id')} was claimed by another step")

    async def write(self, fields: dict[str, Any], metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """Write what was taken since the last write, and `fields` unless another step holds the job now."""
        doc, etag = self.doc, self.etag
        for _ in range(MERGES):
            new = self._counted(doc) | ({} if self.lost else fields)
            new["updated_at"] = datetime.now(timezone.utc).isoformat()
            new["write_id"] = uuid.uuid4().hex  # a retried write whose first attempt landed finds it there
            try:
                self.etag = await write_json(
                    self.state, self.blob, new, etag=etag, metadata=None if self.lost else metadata
                )
            except (PreconditionFailed, ResourceConflict):
                doc, etag = await read_json(self.state, self.blob)
                if doc.get("write_id") == new["write_id"]:
                    self.etag = etag
                    break
                if doc.get("step_id") != self.step_id and not self.lost:
                    self.lost = True
                    log.warning("replay job %s: claimed by another step meanwhile; this one stops", doc.get("job_id"))
                continue
            break
        else:
            raise PreconditionFailed(f"write replay job {self.doc.get('job_id')}", f"{MERGES} writes met another's")
        self.doc = new
        self.written = (len(self.taken.replayed), len(self.taken.set_aside), len(self.taken.skipped))
        return new

    def _counted(self, doc: dict[str, Any]) -> dict[str, Any]:
        """`doc` with what was taken since the last write added (less what a claiming step counted for this one)."""
        counted_for_us = set(doc.get("recovered", [])) if self.lost else set()
        r, a, s = self.written
        replayed = [m for m in self.taken.replayed[r:] if m not in counted_for_us]
        aside = [m for m in self.taken.set_aside[a:] if m not in counted_for_us]
        known = set(doc.get("skipped_ids", []))  # a chunk left parked by two steps is counted once
        skipped = [x for x in self.taken.skipped[s:] if x["message_id"] not in known]
        return doc | {
            "replayed": int(doc.get("replayed", 0)) + len(replayed),
            "set_aside": int(doc.get("set_aside", 0)) + len(aside),
            "skipped_ids": list(doc.get("skipped_ids", [])) + [x["message_id"] for x in skipped],
            "skipped": (list(doc.get("skipped", [])) + skipped)[:SKIPPED_SHOWN],
        }


async def recover(state: ContainerClient, in_hand: list[str], poison_queue: str) -> tuple[list[str], list[str]]:
    """The chunks of a dead step's group no longer parked: (replayed, set aside)."""
    replayed: list[str] = []
    aside: list[str] = []
    for message_id in in_hand:
        if await poison_index.get(state, poison_queue, message_id) is not None:
            continue  # still parked: the claiming step's replay meets it
        if await poison_index.get_set_aside(state, poison_queue, message_id) is not None:
            aside.append(message_id)
        else:
            replayed.append(message_id)
    if replayed or aside:
        log.warning("a dead replay step had taken %d chunk(s) it had not counted: counted now", len(replayed + aside))
    return replayed, aside
