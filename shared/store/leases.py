"""Drain leases: one blob lease per queue and slot, so a bounded number of drainers work a queue."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from azure.storage.blob.aio import BlobLeaseClient, ContainerClient

from shared.core import layout
from shared.core.errors import ResourceConflict, ResourceMissing, StorageError, StorageUnavailable
from shared.store.storage import translated

log = logging.getLogger(__name__)

RATE_KEY, RATE_AT_KEY = "rate", "rateat"  # lease blob metadata: messages/s, and when (epoch seconds)
RENEW_RETRY_S = 1.0  # after a renewal storage could not answer
RENEW_TIMEOUT_S = 3.0  # a renewal not answered by then is tried again
# A holder that could not renew ends its handler calls this long before its lease may lapse for the others (the
# cancelled calls' tasks need a few loop turns to let go of their places).
LAPSE_MARGIN_S = 2.0
WAIT_SLACK_S = 0.001  # a wait shorter than this is not waited: it would return at once, again and again


class DrainLease:
    """Held while a drainer works a queue slot; renewed in the background every third of its period."""

    def __init__(self, container: ContainerClient, queue: str, slot: int, *, lease_s: int) -> None:
        self.queue, self.slot, self.lease_s = queue, slot, lease_s
        self.blob_name = layout.lease_blob(queue, slot)
        self._blob = container.get_blob_client(self.blob_name)
        self._lease: BlobLeaseClient | None = None
        self._renewer: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()
        self.released = False  # True once release succeeded: nobody holds the slot on our account
        self.expires_at = datetime.now(timezone.utc)  # when our lease runs out if nothing renews it
        self._confirmed = time.monotonic()  # when the last acquire or renewal storage answered was sent

    async def acquire(self, on_renew: Callable[[], Awaitable[None]] | None = None) -> bool:
        """True if this drainer now holds the slot; False if someone else does."""
        lease = BlobLeaseClient(self._blob)
        try:
            await self._acquire(lease)
        except ResourceMissing:
            await self._create_blob()
            try:
                await self._acquire(lease)
            except ResourceConflict:
                return False
        except ResourceConflict:
            return False
        self._lease = lease
        self.lost.clear()
        self.released = False
        self.expires_at = datetime.now(timezone.utc) + timedelta(seconds=self.lease_s)
        self._renewer = asyncio.create_task(self._renew_forever(on_renew), name=f"lease {self.queue}/{self.slot}")
        return True

    async def _acquire(self, lease: BlobLeaseClient) -> None:
        sent = time.monotonic()
        async with translated(f"acquire drain lease {self.queue}/{self.slot}"):
            await lease.acquire(lease_duration=self.lease_s)
        self._confirmed = sent

    def lapses_in(self) -> float:
        """Seconds until the lease may lapse for the others, by this process's monotonic clock: its period after the
        last acquire or renewal storage confirmed, counted from when that request was sent (storage counts from
        when it served it, later: never sooner than this)."""
        return self._confirmed + self.lease_s - time.monotonic()

    async def lapsing(self, margin_s: float = LAPSE_MARGIN_S) -> None:
        """Returns `margin_s` before the lease may lapse (waits while renewals keep moving that moment on)."""
        while True:
            left = self.lapses_in() - margin_s
            # Within a millisecond counts as due: a remainder below the clock's resolution would be waited out at
            # once, again and again (the simulation's limits seed 808 spun at one instant; a real clock moves on).
            if left <= WAIT_SLACK_S:
                return
            await asyncio.sleep(left)

    async def _create_blob(self) -> None:
        try:
            async with translated(f"create lease blob {self.queue}/{self.slot}"):
                await self._blob.upload_blob(b"", overwrite=False)
        except ResourceConflict:
            pass  # created meanwhile by another drainer, or leased: acquire decides

    async def _renew_forever(self, on_renew: Callable[[], Awaitable[None]] | None) -> None:
        assert self._lease is not None
        wait_s = self.lease_s / 3
        while True:
            await asyncio.sleep(wait_s)
            try:
                renewing_at, sent = datetime.now(timezone.utc), time.monotonic()
                # Bounded: a renewal whose request hangs (the client's own timeouts and retries take longer than
                # the lease has left) is tried again, not waited for while the lease lapses.
                async with asyncio.timeout(RENEW_TIMEOUT_S), translated(f"renew drain lease {self.queue}/{self.slot}"):
                    await self._lease.renew()
                self.expires_at = renewing_at + timedelta(seconds=self.lease_s)
                self._confirmed = sent
                wait_s = self.lease_s / 3
            except (StorageUnavailable, TimeoutError) as e:
                # The session stops taking work, but its chunks in flight (a slow handler call) still count
                # against the handler limits under this lease: keep it until release, not only until it lapses
                # (the simulator found a second drainer's call beside one whose lease had lapsed under it). If
                # storage stays down it lapses all the same: the session ends its calls before then (`lapsing`).
                log.warning("drain lease %s/%d not renewed, trying again: %s", self.queue, self.slot, e or "timed out")
                self.lost.set()
                wait_s = RENEW_RETRY_S
                continue
            except StorageError as e:
                log.warning("drain lease %s/%d lost: %s", self.queue, self.slot, e)
                self.lost.set()
                return
            if on_renew is not None:
                await on_renew()

    async def publish_rate(self, rate_per_s: float) -> None:
        """Write this drainer's message rate on its lease blob (best effort: the rate is a view)."""
        if self._lease is None:
            return
        metadata = {RATE_KEY: f"{rate_per_s:.1f}", RATE_AT_KEY: str(int(time.time()))}
        try:
            async with translated(f"publish rate of {self.queue}/{self.slot}"):
                await self._blob.set_blob_metadata(metadata, lease=self._lease)
        except StorageError as e:
            log.debug("rate of %s/%d not written: %s", self.queue, self.slot, e)

    def abandon(self) -> None:
        """Stop renewing without releasing: the lease lapses by itself within its period (`expires_at`). For a
        session cancelled while a call it cannot end still runs: the slot, and the claim under it, stay taken
        until then rather than go to the next holder beside that call."""
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        self._lease = None

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
            self._renewer = None
        if self._lease is not None:
            # Also when renewal failed: the failure may have been transient and the lease still ours.
            try:
                async with translated(f"release drain lease {self.queue}/{self.slot}"):
                    await self._lease.release()
                self.released = True
            except StorageError as e:
                # It expires by itself at expires_at; the drainer leaves a wake-up for then.
                log.warning("releasing drain lease %s/%d failed: %s", self.queue, self.slot, e)
        self._lease = None


@dataclass(frozen=True)
class QueueLeases:
    active: int  # slots leased now
    rate_per_s: float  # the sum of the rates the leased slots wrote in the last `fresh_s`


async def queue_leases(container: ContainerClient, queue: str, *, fresh_s: float) -> QueueLeases:
    """The leased slots of `queue` and their total message rate (one listing transaction, with metadata)."""
    active, rate, now = 0, 0.0, time.time()
    async with translated(f"list drain leases of {queue}"):
        async for blob in container.list_blobs(name_starts_with=layout.lease_prefix(queue), include=["metadata"]):
            if blob.lease.state != "leased":
                continue
            active += 1
            meta = blob.metadata or {}
            try:
                if now - int(meta.get(RATE_AT_KEY, "0")) <= fresh_s:
                    rate += float(meta.get(RATE_KEY, "0"))
            except ValueError:
                continue  # not ours to trust: a rate we cannot read counts as none
    return QueueLeases(active, rate)


async def active_drainers(container: ContainerClient, queue: str) -> int:
    """How many slots of `queue` are leased right now (one listing transaction)."""
    return (await queue_leases(container, queue, fresh_s=0)).active
