"""Finalize's half of 3625368 put back: a batch final by its records gets its completion notice stored before its
stamp, so a cancel that read it before its last record and ends it meanwhile wins the stamp (`cancelled`) while the
notice already says `completed`. Caught by the notices' agreement with the status route (`sim.checks.promises`: a
notice never contradicts the batch's final status) in the `stale-cancel` family, whose batches name a callback
half the time; not in 300 `lifecycle` seeds. The status route's half is `status-answers-unstamped-final`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from shared.batch import lifecycle as ending
from shared.batch.batches import Manifest
from shared.batch.results import ResultEntry
from shared.core import layout
from shared.core.errors import PreconditionFailed
from shared.intake import quota_gate
from shared.ops import lifecycle, notices
from shared.ops.status import FINAL, batch_status, crossed_tolerance, failed_items
from shared.services import Services
from shared.store import batch_index
from shared.store.storage import write_json
from sim.mutants.base import Mutant, scoped

CONTRADICTS = "but a completion notice at"  # what `sim.checks.promises` writes


@contextmanager
def _notice_before_stamp() -> Iterator[None]:
    """The fix reverted: the notice is stored as soon as the batch is final by its records, then the stamp is
    written over the ETag read (and may lose to a cancel's end)."""

    async def finalized(
        services: Services, batch_id: str, manifest: Manifest, etag: str, entries: list[ResultEntry]
    ) -> dict[str, Any] | None:
        if crossed_tolerance(manifest, failed_items(manifest, entries)):
            await lifecycle.end(services, batch_id, ending.FAILED)
            manifest, etag, entries = await lifecycle.read(services, batch_id)
        status = batch_status(manifest, entries, datetime.now(timezone.utc))
        if status["status"] not in FINAL or manifest.final_status is not None:
            return None
        await notices.batch_final(services, manifest, status)  # before the stamp: the defect
        await quota_gate.release(services, manifest)
        stamped = replace(manifest, final_status=status["status"], finished_at=datetime.now(timezone.utc).isoformat())
        batches = services.storage.container(services.settings.batches_container)
        try:
            await write_json(batches, layout.manifest_blob(batch_id), stamped.to_json(), etag=etag)
        except PreconditionFailed:
            return None
        await batch_index.restamp(batches, stamped)
        return status

    with scoped(lifecycle, "_finalized", finalized):
        yield


MUTANTS = [
    Mutant("notice-before-stamp", "3625368 (issue 37, lifecycle seed 601)", "finalize stores a batch's completion "
           "notice before it wins the stamp, so a cancel that ends the batch meanwhile is stamped `cancelled` under "
           "a `completed` notice", _notice_before_stamp, family="stale-cancel", expect=CONTRADICTS,
           invariant="a notice never contradicts the batch's final status (`sim.checks.promises`)"),
]  # fmt: skip
