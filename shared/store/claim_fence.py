"""A replay's claim and a batch's final stamp, made exclusive through the manifest's ETag.

A replay claims a parked chunk by marking its items `retrying` in a result record (`shared.ops.replay_marks`); a
finalize stamps the manifest over the ETag it read before listing the records (`shared.ops.lifecycle`). The claim
does not touch the manifest, so a finalize that listed the records just before a claim (every item parked failed,
the batch final by its records) could stamp it `completed_with_failures` just after, and the replayed items then
succeed: the status route says `completed` under that stamp (the simulation's replay seed 787, a replay of
everything whose poison index calls storage answered seconds late, straddling the stamp).

So right after its claim, and before the chunk goes back, a replay rewrites the manifest as it stands over its
ETag (`fence`), unless it is stamped or ended. Whichever of the two writes lands second fails or sees the first:

- the stamp first: the fence finds it, and the replay gives its claim back and sets the chunk aside;
- the fence first: the stamp's ETag, read before the listing and so before the claim, is gone; the finalize
  stamps nothing (`PreconditionFailed`), and its next look lists the claim (the batch is `processing`).

A finalize that read the manifest after the fence lists the records after the claim. Cost: one manifest read and
one PutBlob per chunk a replay puts back (none for a chunk it sets aside, skips or leaves parked).
"""

from __future__ import annotations

from azure.storage.blob.aio import ContainerClient

from shared.batch.batches import Manifest
from shared.core import layout
from shared.core.errors import PreconditionFailed, ReplayConflict, ResourceMissing
from shared.store.storage import read_json, write_json

ATTEMPTS = 5  # rewrites tried while another writer (a cancel's end, another replay's fence) changes it


async def fence(batches: ContainerClient, batch_id: str) -> Manifest | None:
    """Rewrite the manifest as it stands over its ETag, unless it is stamped final or ended (then it is left as
    it is); the manifest as it stands, None if it has none. Raises ReplayConflict when it kept changing (the
    replay gives its claim back and leaves the chunk parked)."""
    name = layout.manifest_blob(batch_id)
    for _ in range(ATTEMPTS):
        try:
            doc, etag = await read_json(batches, name)
        except ResourceMissing:
            return None  # nothing to stamp: nothing to keep consistent with
        manifest = Manifest.from_json(doc)
        if manifest.final_status is not None or manifest.ended is not None:
            return manifest
        try:
            await write_json(batches, name, doc, etag=etag)
        except (PreconditionFailed, ResourceMissing):
            continue
        return manifest
    raise ReplayConflict(
        f"the manifest of batch {batch_id} kept changing while this replay claimed a chunk; replay it again",
        batch_id=batch_id,
    )
