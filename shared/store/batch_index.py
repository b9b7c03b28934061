"""The index of accepted batches, newest first: one empty blob per batch, written when the batch is committed.

Batch ids are random (or derived from an Idempotency-Key), so listing the manifests is not time-ordered.
Each accepted batch gets `index/{inverted accepted time}-{batch id}` in the batches container: names sort
newest first, so one listing page of the index is one page of recent batches, and the blob's metadata
carries the counts, so that page needs no reads. Only an accepted manifest is indexed, so the list never
shows a batch that was not accepted.

Each batch is indexed twice: in the index of every batch (the operator's list) and in its tenant's own
(`tindex/{hash of the tenant}/{inverted accepted time}-{batch id}`), so a caller's list is one listing page of
its own batches, whatever the other tenants hold.

Cost: two PutBlobs per accepted batch, by its submit after the commit. The name and metadata come from the
committed manifest alone, so whoever writes them again writes the same blob (but for its stamp, below). That
closes the gap a submit leaves when it dies (or its write fails) between the commit and the index: its keyed
retry writes it again, and so does a drainer that admits the batch by reading its manifest
(`shared.engine.chunks`), since a submit names its batch in its lanes' marks only once it is indexed.

A batch's final stamp (`final_status`, `shared.ops.lifecycle.finalize`) is written into both blobs' metadata too
(`final`): two more writes, once per batch, so that the list shows what the stamp says (a cancel that ended the
batch after its last record makes it `cancelled`, whatever its records say) without reading the manifest. A
stamp never changes, so an entry that carries one stays right; a stamp write that failed, or a write of the
entry from a manifest read before the stamp, leaves it without `final`, and the list then reads that batch's
manifest (`shared.ops.reports`) and writes the entry again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.batch import labels
from shared.batch.batches import Manifest
from shared.core.errors import MalformedRequest, ResourceMissing, StorageError
from shared.store.storage import translated

log = logging.getLogger(__name__)

PREFIX = "index/"
TENANT_PREFIX = "tindex/"
NEWEST_MS = 10**13 - 1  # epoch ms in 13 digits: until the year 2286
NAME = re.compile(r"(index/|tindex/[0-9a-f]{32}/)(?P<inverted>\d{13})-(?P<batch_id>[0-9a-f]{32})")
# A storage marker: printable ASCII, no spaces (Azure's are base64 with `!` and digits; Azurite's are blob names);
# a few hundred characters at most.
MARKER = re.compile(r"[!-~]{1,512}")
# A continuation this API gives: the last index entry its page showed, then the storage marker in base64url,
# `{inverted ms}-{batch id}.{marker}`. The listing it resumes must go on after that entry, so a token it did not
# give (made up, cut, or another index's) is a 400, never a silent restart at the first page. The OpenAPI
# document gives the same shape.
TOKEN = re.compile(r"(\d{13}-[0-9a-f]{32})\.([A-Za-z0-9_-]{1,700})")
FIRST = f"{0:013d}-{0:032x}"  # what a page that showed no entry of ours goes on after
BAD_CONTINUATION = "continuation is not a token this API gave (pass back the one a page answered)"


@dataclass(frozen=True)
class IndexEntry:
    """One listed batch as its index blob describes it (no read of its manifest)."""

    batch_id: str
    items: int
    chunks: int
    created_at: str
    accepted_at: str
    not_before: str | None = None  # its start, when it asked for one (entries written before this have none)
    max_failed_fraction: float | None = None  # its failure tolerance, when it set one (likewise)
    callback: bool = False  # it named a callback_url (entries written before this say not): the notice sweep's filter
    tenant: str | None = None  # written for a tenant's batch (entries written before this have none)
    metadata: dict[str, str] | None = None  # the batch's labels, when it has some
    final: str | None = (
        None  # its final stamp, once written here (`final_status`; None before, or if that write failed)
    )


@dataclass(frozen=True)
class IndexPage:
    entries: list[IndexEntry]
    continuation: str | None  # opaque, for the next page; None on the last


def epoch_ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def tenant_prefix(tenant: str) -> str:
    """Where a tenant's own index lives: a hash, since a tenant id may hold characters a blob name should not."""
    return f"{TENANT_PREFIX}{hashlib.sha256(tenant.encode()).hexdigest()[:32]}/"


def blob_name(batch_id: str, accepted_at: datetime, prefix: str = PREFIX) -> str:
    """`index/{NEWEST_MS - accepted ms}-{batch id}`: lexical order is newest first."""
    return f"{prefix}{NEWEST_MS - epoch_ms(accepted_at):013d}-{batch_id}"


def metadata(manifest: Manifest) -> dict[str, str]:
    assert manifest.accepted_at is not None, "only an accepted batch is indexed"
    meta = {
        "items": str(manifest.items),
        "chunks": str(manifest.chunks),
        "created_at": manifest.created_at,
        "accepted_at": manifest.accepted_at,
        "tenant": manifest.tenant,
    }
    if manifest.not_before is not None:  # so the list can say `scheduled` without reading the manifest
        meta["not_before"] = manifest.not_before
    if manifest.max_failed_fraction is not None:  # so the list can say it ended past its tolerance
        meta["max_failed_fraction"] = repr(manifest.max_failed_fraction)
    if manifest.callback_url is not None:  # so the notice sweep finds it without reading the manifest
        meta["callback"] = "1"
    if manifest.metadata:  # so the list shows the labels without reading the manifest
        meta["labels"] = labels.encoded(manifest.metadata)
    if manifest.final_status is not None:  # so the list shows the stamp without reading the manifest
        meta["final"] = manifest.final_status
    return meta


def entry(name: str, meta: Mapping[str, str] | None) -> IndexEntry | None:
    """The batch an index blob names, or None for a blob that is not one of ours."""
    found = NAME.fullmatch(name)
    if found is None:
        return None
    meta = meta or {}
    try:
        items, chunks = int(meta["items"]), int(meta["chunks"])
        created, accepted = meta["created_at"], meta["accepted_at"]
    except (KeyError, ValueError):
        return None
    try:
        fraction = float(meta["max_failed_fraction"]) if "max_failed_fraction" in meta else None
    except ValueError:
        fraction = None  # not ours: the list judges it as one without a tolerance
    return IndexEntry(
        found["batch_id"],
        items,
        chunks,
        created,
        accepted,
        meta.get("not_before"),
        max_failed_fraction=fraction,
        callback=meta.get("callback") == "1",
        tenant=meta.get("tenant"),
        metadata=labels.decoded(meta.get("labels")),
        final=meta.get("final"),
    )


def encode_token(after: str, marker: str) -> str:
    """The continuation of a page whose last index entry is `after` (its name without the prefix)."""
    return f"{after}.{base64.urlsafe_b64encode(marker.encode('ascii')).decode('ascii').rstrip('=')}"


def decode_token(token: str) -> tuple[str, str]:
    """The index entry a continuation goes on after (its name past the index's prefix), and the storage marker
    it carries; a 400 for any other
    shape. A token of this shape that this API did not give is refused when its listing does not go on after
    its entry (`page`), or by storage."""
    found = TOKEN.fullmatch(token)
    if found is None:
        raise MalformedRequest(BAD_CONTINUATION)
    after, raw = found[1], found[2]
    try:
        marker = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii")
    except (ValueError, binascii.Error):
        raise MalformedRequest(BAD_CONTINUATION) from None
    if not MARKER.fullmatch(marker):
        raise MalformedRequest(BAD_CONTINUATION)
    return after, marker


async def write(container: ContainerClient, manifest: Manifest) -> None:
    """Index an accepted batch: two PutBlobs (every batch's index, its tenant's), empty, its counts in metadata;
    the same blobs whoever writes them, and however often. Raises StorageError."""
    assert manifest.accepted_at is not None, "only an accepted batch is indexed"
    accepted = datetime.fromisoformat(manifest.accepted_at)
    for prefix in (PREFIX, tenant_prefix(manifest.tenant)):
        name = blob_name(manifest.batch_id, accepted, prefix)
        async with translated(f"index batch {manifest.batch_id}"):
            await container.get_blob_client(name).upload_blob(b"", overwrite=True, metadata=metadata(manifest))


async def record(container: ContainerClient, manifest: Manifest) -> bool:
    """`write`, for a submit: the index is a view, not the data, and the batch is already accepted, so a failed
    write is logged and the submission goes on. Its lanes' marks then leave the batch unnamed, so the drainer
    that admits it reads its manifest and writes the entry (until then it is missing from the list, never from
    storage or its status route)."""
    return await _written(container, manifest, "batch %s accepted but not indexed yet (its drainer indexes it): %s")


async def restamp(container: ContainerClient, manifest: Manifest) -> bool:
    """`write` again, of a batch just stamped final (its `final` in the entry's metadata), best effort: should it
    fail, the list finds an entry its records call complete without a stamp, reads the manifest and writes it."""
    assert manifest.final_status is not None, "only a stamped batch is restamped"
    return await _written(
        container, manifest, "batch %s stamped final, its index entry not (the list reads its manifest): %s"
    )


async def _written(container: ContainerClient, manifest: Manifest, failed: str) -> bool:
    try:
        await write(container, manifest)
    except StorageError as e:
        log.warning(failed, manifest.batch_id, e)
        return False
    return True


async def page(
    container: ContainerClient, limit: int, continuation: str | None = None, tenant: str | None = None
) -> IndexPage:
    """One page of the index (of every batch, or of `tenant`'s), newest first: one ListBlobs call. A marker
    outside the tenant's prefix lists nothing of another's: storage filters by the prefix."""
    after, marker = decode_token(continuation) if continuation is not None else (FIRST, None)
    prefix = PREFIX if tenant is None else tenant_prefix(tenant)
    after = prefix + after
    listing = container.list_blobs(name_starts_with=prefix, include=["metadata"], results_per_page=limit)
    pages: Any = listing.by_page(continuation_token=marker)
    entries: list[IndexEntry] = []
    last = after  # the last entry of ours this page shows
    try:
        async with translated("list the batch index"):
            async for one_page in pages:
                blobs = [b async for b in one_page]
                if marker is not None and any(b.name <= after for b in blobs):
                    raise MalformedRequest(BAD_CONTINUATION)  # it does not go on after its page
                for blob in blobs:
                    if (found := entry(blob.name, blob.metadata)) is not None:
                        entries.append(found)
                        last = blob.name
                break
    except ResourceMissing:
        return IndexPage([], None)  # no batch was ever accepted: the container does not exist yet
    except StorageError as e:
        if marker is not None and e.status == 400:
            raise MalformedRequest(BAD_CONTINUATION) from None
        raise
    next_marker = pages.continuation_token
    return IndexPage(entries, encode_token(last[len(prefix) :], next_marker) if next_marker else None)


async def since(container: ContainerClient, oldest: datetime) -> AsyncIterator[IndexEntry]:
    """The entries of the batches accepted at `oldest` or later, newest first: one ListBlobs call per 5,000 of
    them, and the listing stops at the first older one (names sort by accepted time)."""
    last = blob_name("f" * 32, oldest)  # the oldest name still wanted
    try:
        async with translated("list the batch index"):
            async for blob in container.list_blobs(name_starts_with=PREFIX, include=["metadata"]):
                if blob.name > last:
                    return
                found = entry(blob.name, blob.metadata)
                if found is not None:
                    yield found
    except ResourceMissing:
        return  # no batch was ever accepted
