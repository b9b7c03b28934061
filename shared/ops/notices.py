"""Completion notices: a batch that named a `callback_url` gets its final status POSTed there, signed as Standard
Webhooks does (`shared.core.webhooks`), at least once, retried with back-off for CALLBACK_WINDOW_S (a notice whose
events were all lost for its whole window gets one attempt when an event finally runs, never none).

A notice is stored work, like a chunk: `notices/<batch id>.json` in the state container holds its body (fixed
when the batch became final, so every attempt sends the same bytes), its attempts, and when the next is due; a
`notify` trigger event, scheduled on Service Bus for that time, runs the attempt (`step`). An attempt first
claims the notice (moving its due time on, written with the blob's ETag) and schedules the event of the next
attempt, and only then POSTs: a host killed during the POST leaves the next attempt's event on Service Bus. If
that event was never published (Service Bus away, or a crash between the two writes), the fallback timer's
`sweep` and the batch's status read publish it again once it is STALL_S overdue.

Who calls `batch_final`: `shared.ops.lifecycle.finalize`, the one place that notices a batch became final
(after each drain execution, for each batch whose chunks it settled, and after a cancel: one manifest read and
one result listing per batch, never per chunk), and the batch status read (which heals a notice that was never
stored because that call failed).
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

import aiohttp
import yarl
from aiohttp import ClientConnectorError, ClientSSLError

from shared.batch.batches import Manifest
from shared.core import webhooks
from shared.core.errors import (
    PreconditionFailed,
    ResourceConflict,
    ResourceMissing,
    TriggerUnavailable,
)
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import Settings
from shared.services import Services
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger(__name__)

PREFIX = "notices/"
STALL_S = 60.0  # a pending notice this overdue has lost its event: the sweep or a status read publishes it again
EARLY_S = 1.0  # an event this early is a duplicate of one whose attempt already ran (the due time moved on)
# An attempt holds the notice (its claim) at least for its Service Bus publish, its POST and this much more, so
# that no second attempt starts while the first may still be sending, whatever the retry delay.
CLAIM_MARGIN_S = 10.0
MAX_RESPONSE_BYTES = 1024  # of a receiver's answer, only this much is read (and never shown)
# What the status route says of a failed attempt: a fixed reason, never the receiver's words or the raw error
# (they would make the route a port scanner's and a banner grabber's tool); the full error is logged.
REASONS = frozenset(
    {"not_allowed", "connect_failed", "tls", "timeout", "send_failed", "http_1xx", "http_3xx", "http_4xx", "http_5xx"}
)


def notice_blob(batch_id: str) -> str:
    return f"{PREFIX}{batch_id}.json"


def iso(epoch_s: float | None) -> str | None:
    return None if epoch_s is None else datetime.fromtimestamp(epoch_s, timezone.utc).isoformat()


@dataclass(frozen=True)
class Notice:
    batch_id: str
    url: str
    body: str  # the JSON sent on every attempt
    created_s: float
    deadline_s: float  # no attempt starts after this
    state: str = "pending"  # pending | delivered | failed
    attempts: int = 0
    next_due_s: float | None = None
    last_status: int | None = None
    last_error: str | None = None  # one of REASONS
    finished_s: float | None = None
    timeouts: int = 0  # attempts that got no answer within CALLBACK_TIMEOUT_S (they lengthen the waits)
    tenant: str = webhooks.SHARED_TENANT  # its batch's: the key it is signed with (webhooks.keys)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Notice:
        return cls(**doc)

    def metadata(self) -> dict[str, str]:
        """What the sweep reads from a listing, without reading the blob."""
        due = "" if self.next_due_s is None else str(int(self.next_due_s))
        return {"state": self.state, "next_due": due}

    def view(self) -> dict[str, Any]:
        """The `callback` part of the batch status."""
        return {
            "url": self.url,
            "state": self.state,
            "attempts": self.attempts,
            "next_attempt_at": iso(self.next_due_s) if self.state == "pending" else None,
            "last_status": None if self.last_status is None else f"{self.last_status // 100}xx",
            "last_error": shown_reason(self.last_error),
            "delivered_at": iso(self.finished_s) if self.state == "delivered" else None,
            "gave_up_at": iso(self.finished_s) if self.state == "failed" else None,
        }


def shown_reason(error: str | None) -> str | None:
    """A stored reason as the status route shows it (a notice stored before REASONS held the raw error)."""
    return None if error is None else error if error in REASONS else "send_failed"


async def batch_final(services: Services, manifest: Manifest, status: dict[str, Any]) -> Notice | None:
    """Store the notice of a batch whose status became final and publish its first attempt; idempotent (a
    second call finds the notice and only revives it if it stalled). None for a batch without a callback."""
    if manifest.callback_url is None:
        return None
    if status["status"] not in webhooks.FINAL_STATUSES:
        raise ValueError(f"batch {manifest.batch_id} is {status['status']}, not final")
    now = time.time()
    body = webhooks.body(status, datetime.fromtimestamp(now, timezone.utc).isoformat())
    notice = Notice(
        manifest.batch_id,
        manifest.callback_url,
        body.decode("utf-8"),
        created_s=now,
        deadline_s=now + services.settings.callback_window_s,
        next_due_s=now,
        tenant=manifest.tenant,
    )
    state = await services.storage.ensure_container(services.settings.state_container)
    try:
        await write_json(
            state, notice_blob(notice.batch_id), notice.to_json(), create_only=True, metadata=notice.metadata()
        )
    except (ResourceConflict, PreconditionFailed):
        found, _ = await read(services, manifest.batch_id)
        await revive(services, found)
        return found
    log.info("batch %s is %s: its completion notice is stored", manifest.batch_id, status["status"])
    await publish(services, notice.batch_id)
    return notice


async def read(services: Services, batch_id: str) -> tuple[Notice, str]:
    """The notice and its ETag; ResourceMissing if the batch has none (yet)."""
    state = services.storage.container(services.settings.state_container)
    doc, etag = await read_json(state, notice_blob(batch_id))
    return Notice.from_json(doc), etag


async def publish(services: Services, batch_id: str, at: float | None = None) -> bool:
    """The `notify` event of the notice's next attempt, at `at` (epoch s) or now; False if Service Bus is away
    (the sweep or a status read publishes it again)."""
    queue = services.settings.partition_queues()[0]  # events name a queue; a notice's is the first partition
    event = TriggerEvent(services.settings.account_name, queue, Reason.NOTIFY, batch_id=batch_id)
    when = None if at is None else datetime.fromtimestamp(at, timezone.utc)
    try:
        await services.publisher.publish(event, at=when)
    except TriggerUnavailable as e:
        log.warning("batch %s: notice attempt not scheduled (the sweep will): %s", batch_id, e)
        return False
    return True


def stalled(notice: Notice, now: float) -> bool:
    return notice.state == "pending" and notice.next_due_s is not None and notice.next_due_s < now - STALL_S


async def revive(services: Services, notice: Notice) -> bool:
    """Publish the attempt of a notice whose event was lost."""
    if not stalled(notice, time.time()):
        return False
    log.warning("batch %s: its notice was due at %s and no attempt ran; publishing one", notice.batch_id,
                iso(notice.next_due_s))  # fmt: skip
    return await publish(services, notice.batch_id)


async def step(services: Services, batch_id: str) -> str:
    """One attempt of the notice, if it is due and nobody else holds it; what happened, for the drain report."""
    try:
        notice, etag = await read(services, batch_id)
    except ResourceMissing:
        log.warning("notify event for batch %s, which has no notice; ignored", batch_id)
        return "notice-missing"
    now = time.time()
    if notice.state != "pending":
        return f"notice-{notice.state}"
    if notice.next_due_s is not None and notice.next_due_s > now + EARLY_S:
        return "notice-not-due"
    state = services.storage.container(services.settings.state_container)
    if now >= notice.deadline_s and notice.attempts:
        # A crash during the last attempt brought its event back: no attempt starts now. A notice none of whose
        # events ever ran (each lost, and the sweeps' too, for its whole window) still gets its one attempt: "at
        # least once" is never a give-up without a POST.
        return await give_up(state, notice, etag)
    settings = services.settings
    attempt = notice.attempts + 1
    delay = webhooks.next_delay_s(
        attempt, base_s=settings.callback_retry_base_s, max_s=settings.callback_retry_max_s, u=random.random(),
        timeouts=notice.timeouts,
    )  # fmt: skip
    last = now + delay > notice.deadline_s
    # Held past the POST's longest time whatever the delay (no overlap); the last one too: a crash during it comes
    # back once, and then gives up.
    hold = max(0.0 if last else delay, settings.publish_timeout_s + settings.callback_timeout_s + CLAIM_MARGIN_S)
    claimed = replace(notice, attempts=attempt, next_due_s=now + hold)
    try:
        etag = await write_json(state, notice_blob(batch_id), claimed.to_json(), etag=etag, metadata=claimed.metadata())
    except (PreconditionFailed, ResourceConflict):
        return "notice-taken"
    await publish(services, batch_id, at=claimed.next_due_s)
    ok, status, reason = await deliver(services, claimed)
    done = outcome(settings, claimed, now, last, ok, status, reason)
    try:
        await write_json(state, notice_blob(batch_id), done.to_json(), etag=etag, metadata=done.metadata())
    except (PreconditionFailed, ResourceConflict):
        log.warning("batch %s: notice attempt %d's outcome not written (another attempt took it)", batch_id, attempt)
        return "notice-retrying"
    if done.state == "pending" and done.next_due_s != claimed.next_due_s:
        await publish(services, batch_id, at=done.next_due_s)  # it timed out: the next attempt waits longer
    log.log(
        logging.INFO if ok else logging.WARNING,
        "batch %s: notice attempt %d to %s: %s", batch_id, attempt, webhooks.host_of(notice.url),
        "delivered" if ok else f"{reason}; {done.state}" + (f", next at {iso(done.next_due_s)}" if not last else ""),
    )  # fmt: skip
    return f"notice-{done.state if done.state != 'pending' else 'retrying'}"


def outcome(
    settings: Settings, claimed: Notice, started: float, last: bool, ok: bool, status: int | None, reason: str | None
) -> Notice:
    """The notice after its attempt: delivered, failed (the last attempt, or the next one would start past the
    deadline), or pending; an attempt that timed out moves the next one on (`webhooks.next_delay_s`)."""
    if ok:
        return replace(claimed, state="delivered", next_due_s=None, last_status=status, last_error=None,
                       finished_s=time.time())  # fmt: skip
    timeouts = claimed.timeouts + (reason == "timeout")
    due = claimed.next_due_s
    if reason == "timeout" and not last:
        delay = webhooks.next_delay_s(
            claimed.attempts, base_s=settings.callback_retry_base_s, max_s=settings.callback_retry_max_s,
            u=random.random(), timeouts=timeouts,
        )  # fmt: skip
        due = max(due or 0.0, started + delay)
    if last or (due is not None and due >= claimed.deadline_s):
        return replace(claimed, state="failed", next_due_s=None, last_status=status, last_error=reason,
                       finished_s=time.time(), timeouts=timeouts)  # fmt: skip
    return replace(claimed, next_due_s=due, last_status=status, last_error=reason, timeouts=timeouts)


async def give_up(state: Any, notice: Notice, etag: str) -> str:
    """Mark a notice past its deadline failed, without an attempt."""
    failed = replace(notice, state="failed", next_due_s=None, finished_s=time.time())
    try:
        await write_json(state, notice_blob(notice.batch_id), failed.to_json(), etag=etag, metadata=failed.metadata())
    except (PreconditionFailed, ResourceConflict):
        return "notice-taken"
    log.warning("batch %s: its notice is past its deadline after %d attempt(s); gave up", notice.batch_id,
                notice.attempts)  # fmt: skip
    return "notice-failed"


async def deliver(services: Services, notice: Notice) -> tuple[bool, int | None, str | None]:
    """POST the notice once, to the URL byte for byte as the batch reports it (nothing re-encoded): no redirect
    followed, CALLBACK_TIMEOUT_S in all, at most MAX_RESPONSE_BYTES of the answer read. (delivered?, HTTP status,
    one of REASONS); the raw error is logged, never stored."""
    settings = services.settings
    try:
        webhooks.checked_callback_url(
            notice.url, origins=settings.callback_origins(), allow_http_loopback=settings.callback_allow_http_loopback
        )
    except ValueError as e:  # the allow-list changed since the submit
        log.warning("batch %s: notice not sent: %s", notice.batch_id, e)
        return False, None, "not_allowed"
    body = notice.body.encode("utf-8")
    signing = webhooks.keys(notice.tenant, settings.callback_secret, settings.callback_secret_previous)
    headers = webhooks.headers(signing, webhooks.message_id(notice.batch_id), int(time.time()), body)
    timeout = aiohttp.ClientTimeout(total=settings.callback_timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            url = yarl.URL(notice.url, encoded=True)
            async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                await response.content.read(MAX_RESPONSE_BYTES)
                if 200 <= response.status < 300:
                    return True, response.status, None
                return False, response.status, f"http_{response.status // 100}xx"
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        reason = failure_reason(e)
        log.warning("batch %s: notice attempt to %s: %s (%s: %s)", notice.batch_id, webhooks.host_of(notice.url),
                    reason, type(e).__name__, e)  # fmt: skip
        return False, None, reason


def failure_reason(error: BaseException) -> str:
    """The fixed reason (one of REASONS) for an attempt that got no HTTP answer."""
    if isinstance(error, ClientSSLError | ssl.SSLError):
        return "tls"
    if isinstance(error, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
        return "timeout"
    if isinstance(error, ClientConnectorError | ConnectionRefusedError | socket.gaierror):
        return "connect_failed"
    return "send_failed"


async def for_status(services: Services, manifest: Manifest, status: dict[str, Any]) -> dict[str, Any] | None:
    """The `callback` part of a batch's status (one read); heals a batch stamped final whose notice was never
    stored and a notice whose event was lost. A batch final by its records but not stamped gets no notice here: a
    cancel's end could still overturn that status (`shared.ops.lifecycle.finalize` stamps, then notices)."""
    if manifest.callback_url is None:
        return None
    try:
        notice, _ = await read(services, manifest.batch_id)
    except ResourceMissing:
        if status["status"] not in webhooks.FINAL_STATUSES or manifest.final_status is None:
            return {"url": manifest.callback_url, "state": "waiting"}  # unstamped: the stamp decides, then notices
        created = await batch_final(services, manifest, status)
        assert created is not None
        return created.view()
    await revive(services, notice)
    return notice.view()


async def listed(services: Services) -> dict[str, dict[str, str]]:
    """Every stored notice's metadata by batch id: one listing (with metadata, no reads) per 5,000 notices."""
    state = await services.storage.ensure_container(services.settings.state_container)
    found = {}
    async with translated("list notices"):
        async for blob in state.list_blobs(name_starts_with=PREFIX, include=["metadata"]):
            found[blob.name.removeprefix(PREFIX).removesuffix(".json")] = dict(blob.metadata or {})
    return found


async def sweep(services: Services, found: dict[str, dict[str, str]] | None = None) -> int:
    """The fallback timer's net: publish the attempt of every pending notice of `found` (`listed`, read here if
    not given) STALL_S overdue; how many it published. (The timer runs `shared.ops.notice_sweep.sweep`, which
    also stores the notice of a final batch that has none.)"""
    if found is None:
        found = await listed(services)
    now = time.time()
    overdue = []
    for batch_id, meta in found.items():
        due = meta.get("next_due", "")
        if meta.get("state") == "pending" and due.isdigit() and int(due) < now - STALL_S:
            overdue.append(batch_id)
    published = 0
    for batch_id in overdue:
        log.warning("batch %s: its notice is overdue and no attempt ran; publishing one", batch_id)
        published += await publish(services, batch_id)
    return published
