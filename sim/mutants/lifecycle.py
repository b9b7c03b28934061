"""Defects in the batch lifecycle (cancel, expiry, notices, replay), caught by the lifecycle checks
(`sim.invariants.Cancels` and the final checks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from shared.core.errors import ResourceMissing
from shared.ops import lifecycle
from shared.ops.status import batch_status
from shared.store import ended
from shared.store.storage import translated
from sim.mutants.base import Mutant, swap


@contextmanager
def _ended_marker_goes_at_last_record() -> Iterator[None]:
    """dd28184 reverted: finalize deletes an ended batch's marker once every chunk of it has a record, though a
    chunk recorded by a drainer that died before deleting its message is still to come back."""
    finalize = lifecycle.finalize

    async def unmarking(services: Any, batch_id: str) -> Any:
        manifest, _, entries = await lifecycle.read(services, batch_id)
        status = batch_status(manifest, entries, datetime.now(timezone.utc))
        recorded = {e.chunk for e in entries}
        if manifest.ended is not None and status["items"]["pending"] == 0 and len(recorded) == manifest.chunks:
            state = services.storage.container(services.settings.state_container)
            with contextlib.suppress(ResourceMissing):
                async with translated("delete ended marker"):
                    await state.delete_blob(ended.marker(batch_id))
        return await finalize(services, batch_id)

    yield from swap(lifecycle, "finalize", unmarking)


MUTANTS = [
    Mutant("ended-marker-goes-at-last-record", "dd28184 (found here)", "an ended batch's marker deleted once every "
           "chunk has a record", _ended_marker_goes_at_last_record, expect="after its cancel was answered"),
]  # fmt: skip
