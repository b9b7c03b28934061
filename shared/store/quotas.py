"""Each tenant's quotas: the most items it may have pending (`TENANT_MAX_PENDING_ITEMS`) and the most submits it
may make in a minute (`TENANT_MAX_SUBMITS_PER_MIN`).

One small blob per tenant, `quotas/{hash of the tenant}.json` in the state container, holds its use: the
batches it has pending with their item counts (accepted, not yet final) and its submits in the current minute.
A submit reserves its batch in it (one read and one write over its ETag, again if another submit of the tenant
wrote meanwhile), whatever the batch's size: no read per item. A refused submit writes nothing here. A batch
leaves it when it becomes final (`shared.ops.lifecycle`: one read and one write, once per batch), or when its
submit fails. Reserving and releasing name the batch, so doing either twice changes nothing. The blob's
metadata repeats the use, so the operator's view of every tenant is one listing. With both limits 0 (the
default) nothing here is read or written.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import (
    LimitExceeded,
    PreconditionFailed,
    QuotaExceeded,
    ResourceConflict,
    ResourceMissing,
    StorageError,
)
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger(__name__)

PREFIX = "quotas/"
ATTEMPTS = 8  # writes over another submit's of the same tenant before giving up (a 503, nothing stored)
PENDING_RETRY_S = 30  # a tenant at its pending limit: its batches finish in their own time


@dataclass(frozen=True)
class Limits:
    max_pending_items: int = 0  # 0: none
    max_submits_per_min: int = 0

    @property
    def on(self) -> bool:
        return bool(self.max_pending_items or self.max_submits_per_min)


@dataclass
class Use:
    """A tenant's use: its pending batches (batch id -> items) and its submits in minute `minute` (epoch min)."""

    tenant: str
    pending: dict[str, int] = field(default_factory=dict)
    minute: int = 0
    submits: int = 0

    @property
    def pending_items(self) -> int:
        return sum(self.pending.values())

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "pending": self.pending, "minute": self.minute, "submits": self.submits}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Use:
        return cls(str(doc["tenant"]), dict(doc.get("pending", {})), int(doc["minute"]), int(doc["submits"]))

    def metadata(self) -> dict[str, str]:
        items = self.pending_items
        return {
            "tenant": self.tenant,
            "pending_items": str(items),
            "minute": str(self.minute),
            "submits": str(self.submits),
        }


def blob_name(tenant: str) -> str:
    return f"{PREFIX}{hashlib.sha256(tenant.encode()).hexdigest()[:32]}.json"


def admitted(use: Use, batch_id: str, items: int, limits: Limits, now_s: float) -> Use:
    """The use with the batch reserved; QuotaExceeded naming the limit it would pass (pure)."""
    minute = int(now_s // 60)
    submits = use.submits if use.minute == minute else 0
    if limits.max_submits_per_min and submits >= limits.max_submits_per_min:
        raise QuotaExceeded(
            f"tenant {use.tenant!r} made {submits} submits this minute, the most TENANT_MAX_SUBMITS_PER_MIN allows",
            limit="TENANT_MAX_SUBMITS_PER_MIN",
            maximum=limits.max_submits_per_min,
            retry_after_s=max(1, math.ceil((minute + 1) * 60 - now_s)),
            tenant=use.tenant,
        )
    pending = use.pending_items - use.pending.get(batch_id, 0)
    if limits.max_pending_items and pending + items > limits.max_pending_items:
        raise QuotaExceeded(
            f"tenant {use.tenant!r} has {pending} items pending; {items} more would pass TENANT_MAX_PENDING_ITEMS",
            limit="TENANT_MAX_PENDING_ITEMS",
            maximum=limits.max_pending_items,
            retry_after_s=PENDING_RETRY_S,
            tenant=use.tenant,
            pending_items=pending,
        )
    return Use(use.tenant, use.pending | {batch_id: items}, minute, submits + 1)


def check_size(items: int, limits: Limits) -> None:
    """A batch larger than the pending limit itself can never be admitted: a 413, not a 429 to retry."""
    if limits.max_pending_items and items > limits.max_pending_items:
        raise LimitExceeded(
            f"the batch has {items} items, more than a tenant may have pending (TENANT_MAX_PENDING_ITEMS)",
            limit="TENANT_MAX_PENDING_ITEMS",
            maximum=limits.max_pending_items,
        )


async def read(state: ContainerClient, tenant: str) -> tuple[Use, str | None]:
    try:
        doc, etag = await read_json(state, blob_name(tenant))
    except ResourceMissing:
        return Use(tenant), None
    return Use.from_json(doc), etag


async def write(state: ContainerClient, use: Use, etag: str | None) -> None:
    """Over `etag`, or create-only without one; PreconditionFailed/ResourceConflict if another wrote first."""
    await write_json(
        state, blob_name(use.tenant), use.to_json(), etag=etag, create_only=etag is None, metadata=use.metadata()
    )


async def reserve(state: ContainerClient, tenant: str, batch_id: str, items: int, limits: Limits, now_s: float) -> None:
    """Count the batch against the tenant's quotas, or raise QuotaExceeded (nothing written)."""
    for _ in range(ATTEMPTS):
        use, etag = await read(state, tenant)
        try:
            await write(state, admitted(use, batch_id, items, limits, now_s), etag)
            return
        except (PreconditionFailed, ResourceConflict):
            continue
    raise StorageError("reserve quota", f"tenant {tenant}'s quota kept changing under {ATTEMPTS} writes", status=409)


async def release(state: ContainerClient, tenant: str, batch_id: str) -> None:
    """The batch no longer counts as pending (best effort: logged, never raised)."""
    try:
        for _ in range(ATTEMPTS):
            use, etag = await read(state, tenant)
            if batch_id not in use.pending or etag is None:
                return
            use.pending.pop(batch_id)
            try:
                await write(state, use, etag)
                return
            except PreconditionFailed:
                continue
    except StorageError as e:
        log.warning("batch %s: could not release it from tenant %s's pending quota: %s", batch_id, tenant, e)
        return
    log.warning("batch %s: tenant %s's quota kept changing; the batch still counts as pending", batch_id, tenant)


async def every_use(state: ContainerClient) -> list[dict[str, Any]]:
    """Every tenant's use, from one listing (a page per 5,000 tenants): their blobs' metadata, no reads."""
    out = []
    try:
        async with translated("list the quotas"):
            async for blob in state.list_blobs(name_starts_with=PREFIX, include=["metadata"]):
                meta = blob.metadata or {}
                if "tenant" in meta:
                    out.append(
                        {
                            "tenant": meta["tenant"],
                            "pending_items": int(meta.get("pending_items", "0")),
                            "minute": int(meta.get("minute", "0")),
                            "submits": int(meta.get("submits", "0")),
                        }
                    )
    except ResourceMissing:
        return []
    return sorted(out, key=lambda u: str(u["tenant"]))
