"""The fallback timer's net for completion notices: every batch that named a callback and is final has a notice,
and every pending notice has its attempt on Service Bus, whatever died when.

A notice is stored after its batch is stamped final (`shared.ops.lifecycle.finalize`), and `finalize` runs
after each drain execution that settled chunks of the batch. A host killed after a batch's last chunk and
before that call (or between the stamp and the notice), or a storage error in it, leaves a final batch that nobody
looks at again; this sweep does:
it lists the stored notices, then the batch index back to HORIZON_S ago, and checks the batches that named a
callback (the index entry says so) and have no notice yet.

Cost per tick (the fallback timer's, every 6 h by default): one listing per 5,000 notices, one listing of the
index per 5,000 batches accepted within HORIZON_S, and for at most MAX_CHECKS of the batches with a callback
and no notice (a random choice among them when there are more, so that none is starved) one manifest read and
one result listing each, plus for one found final its stamp when it has none (with the tenant quota's release
when limits are on) and the notice's write and Service Bus message. A batch with a callback costs those two reads
at every tick while it runs; a batch without one costs nothing. A notice follows its stamp (`finalize`), so a
stamp storage refused is retried here at each tick, one write per batch final by its records and unstamped, and
its notice goes at the first tick after storage takes it: no read is added for that, the batches checked are the
same.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta, timezone

from shared.core.errors import NotFound, StorageError
from shared.ops import lifecycle, notices
from shared.services import Services
from shared.store import batch_index, ended

log = logging.getLogger(__name__)

HORIZON_S = ended.KEEP_S  # a batch's chunk lives at most 7 days in its queue: one accepted before is long final
MAX_CHECKS = 100  # batches checked per tick at most


async def sweep(services: Services) -> tuple[int, int]:
    """(notice attempts published again, notices stored for final batches that had none)."""
    found = await notices.listed(services)
    published = await notices.sweep(services, found)
    oldest = datetime.now(timezone.utc) - timedelta(seconds=HORIZON_S)
    batches = services.storage.container(services.settings.batches_container)
    candidates = [
        e.batch_id async for e in batch_index.since(batches, oldest) if e.callback and e.batch_id not in found
    ]
    if len(candidates) > MAX_CHECKS:
        candidates = random.sample(candidates, MAX_CHECKS)
    stored = 0
    for batch_id in candidates:
        try:
            if await lifecycle.noticed(services, batch_id):
                log.warning("batch %s was final without its completion notice; stored it now", batch_id)
                stored += 1
        except (StorageError, NotFound) as e:
            log.warning("batch %s: could not check whether it needs a completion notice: %s", batch_id, e)
    return published, stored
