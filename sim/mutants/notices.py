"""Defects of completion notices put back (issue 36 items 10 and 14, fixed in ca37d7d), caught by the receiver's
judgement of every POST and every API answer (`sim.receiver`) in the lifecycle family's notice drills
(`sim.doors.notice_drills`)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import yarl

from shared.core import webhooks
from shared.core.errors import PreconditionFailed, ResourceConflict, ResourceMissing
from shared.core.origins import Origin, origin
from shared.ops import notices
from shared.store.storage import write_json
from sim.mutants.base import Mutant, scoped, swap
from sim.receiver import AIOHTTP

OLD_CLAIM_MARGIN_S = 30.0  # ca37d7d's parent: the last attempt held its notice for its timeout and this long
SHOWN_ERROR = 200  # ca37d7d's parent: this much of a receiver's answer or of the error went to the status route
Step = Callable[[Any, str], Coroutine[Any, Any, str]]


def _step(*, held_for_delay: bool, deadline_judged: bool) -> Step:
    """`notices.step` as today, with one of ca37d7d's pieces put back: the claim held for the retry delay only
    (the last attempt's for its timeout and 30 s), or no deadline judged for an attempt whose event came back."""

    async def step(services: Any, batch_id: str) -> str:
        try:
            notice, etag = await notices.read(services, batch_id)
        except ResourceMissing:
            return "notice-missing"
        now = time.time()
        if notice.state != "pending":
            return f"notice-{notice.state}"
        if notice.next_due_s is not None and notice.next_due_s > now + notices.EARLY_S:
            return "notice-not-due"
        settings = services.settings
        state = services.storage.container(settings.state_container)
        if deadline_judged and now >= notice.deadline_s and notice.attempts:
            return await notices.give_up(state, notice, etag)
        attempt = notice.attempts + 1
        delay = webhooks.next_delay_s(attempt, base_s=settings.callback_retry_base_s,
                                      max_s=settings.callback_retry_max_s, u=random.random(),
                                      timeouts=notice.timeouts)  # fmt: skip
        last = now + delay > notice.deadline_s
        if held_for_delay:
            hold = settings.callback_timeout_s + OLD_CLAIM_MARGIN_S if last else delay
        else:
            hold = max(0.0 if last else delay, settings.publish_timeout_s + settings.callback_timeout_s
                       + notices.CLAIM_MARGIN_S)  # fmt: skip
        claimed = replace(notice, attempts=attempt, next_due_s=now + hold)
        try:
            etag = await write_json(state, notices.notice_blob(batch_id), claimed.to_json(), etag=etag,
                                    metadata=claimed.metadata())  # fmt: skip
        except (PreconditionFailed, ResourceConflict):
            return "notice-taken"
        await notices.publish(services, batch_id, at=claimed.next_due_s)
        ok, status, reason = await notices.deliver(services, claimed)
        done = notices.outcome(settings, claimed, now, last, ok, status, reason)
        try:
            await write_json(state, notices.notice_blob(batch_id), done.to_json(), etag=etag,
                             metadata=done.metadata())  # fmt: skip
        except (PreconditionFailed, ResourceConflict):
            return "notice-retrying"
        if done.state == "pending" and done.next_due_s != claimed.next_due_s:
            await notices.publish(services, batch_id, at=done.next_due_s)
        return f"notice-{done.state if done.state != 'pending' else 'retrying'}"

    return step


@contextmanager
def _claim_held_for_the_delay() -> Iterator[None]:
    """ca37d7d reverted (issue 36 item 10): an attempt holds its notice for the retry delay only, so with a delay
    shorter than the POST (CALLBACK_RETRY_BASE_S below CALLBACK_TIMEOUT_S, a receiver slower than the timeout) the
    next attempt starts while the previous one still waits for its answer."""
    yield from swap(notices, "step", _step(held_for_delay=True, deadline_judged=True))


@contextmanager
def _redelivered_past_the_deadline() -> Iterator[None]:
    """ca37d7d reverted (issue 36 item 10): an attempt whose event comes back after the notice's deadline (its
    instance killed during the last attempt) is not judged against the deadline, and POSTs once more."""
    yield from swap(notices, "step", _step(held_for_delay=False, deadline_judged=False))


@contextmanager
def _allowed_by_host() -> Iterator[None]:
    """ca37d7d reverted (issue 36 item 14): CALLBACK_ALLOWED_HOSTS matched by host only, so any port of an allowed
    host is accepted (its SSH, a storage emulator, the app itself), and notices go there."""
    checked = webhooks.checked_callback_url

    def by_host(url: str, *, origins: frozenset[Origin], allow_http_loopback: bool) -> str:
        with contextlib.suppress(ValueError):
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            if parts.scheme in ("https", "http") and any(host == allowed for _, allowed, _ in origins):
                origins = origins | {origin(parts.scheme, host, parts.port)}  # this port of the host too
        return checked(url, origins=origins, allow_http_loopback=allow_http_loopback)

    yield from swap(webhooks, "checked_callback_url", by_host)


@contextmanager
def _error_shown_raw() -> Iterator[None]:
    """ca37d7d reverted (issue 36 item 14): a failed attempt's error is stored as the receiver's answer (its first
    200 characters) or the raw connection error, and the status route shows it as stored."""

    async def deliver(services: Any, notice: Any) -> tuple[bool, int | None, str | None]:
        settings = services.settings
        try:
            webhooks.checked_callback_url(notice.url, origins=settings.callback_origins(),
                                          allow_http_loopback=settings.callback_allow_http_loopback)  # fmt: skip
        except ValueError as e:
            return False, None, str(e)
        aiohttp = getattr(notices, AIOHTTP)  # the world's stand-in while it runs
        body = notice.body.encode("utf-8")
        signing = webhooks.keys(notice.tenant, settings.callback_secret, settings.callback_secret_previous)
        headers = webhooks.headers(signing, webhooks.message_id(notice.batch_id), int(time.time()), body)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=settings.callback_timeout_s),
                                             trust_env=False) as session:  # fmt: skip
                url = yarl.URL(notice.url, encoded=True)
                async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                    head = await response.content.read(notices.MAX_RESPONSE_BYTES)
                    if 200 <= response.status < 300:
                        return True, response.status, None
                    text = head.decode("utf-8", "replace")[:SHOWN_ERROR]
                    return False, response.status, f"HTTP {response.status}" + (f": {text}" if text.strip() else "")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            return False, None, f"{type(e).__name__}: {e}"[:SHOWN_ERROR]

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(notices, "deliver", deliver))
        stack.enter_context(scoped(notices, "shown_reason", lambda error: error))
        yield


# the receiver's judgement of a POST, and the stray submits' (`sim.doors.notice_drills`)
ALLOWED = "an origin not allowed"
MUTANTS = [
    Mutant("notice-claim-held-for-the-delay", "ca37d7d (issue 36 item 10)", "a notice attempt holds its claim for "
           "the retry delay only, shorter than the POST", _claim_held_for_the_delay, family="lifecycle",
           expect="in flight at once", invariant="one notice's attempts never overlap (`sim.receiver`)"),
    Mutant("notice-redelivered-past-the-deadline", "ca37d7d (issue 36 item 10)", "an attempt whose event came "
           "back after the notice's deadline POSTs again", _redelivered_past_the_deadline, family="lifecycle",
           expect="past its deadline", invariant="no notice attempt but the first starts past its deadline "
           "(`sim.receiver`)"),
    Mutant("callback-allowed-by-host", "ca37d7d (issue 36 item 14)", "CALLBACK_ALLOWED_HOSTS matched by host, any "
           "port", _allowed_by_host, family="lifecycle", expect=ALLOWED,
           invariant="no submit naming another origin is accepted, no notice POST reaches one (`sim.receiver`)"),
    Mutant("notice-error-shown-raw", "ca37d7d (issue 36 item 14)", "the receiver's answer or the raw error shown in "
           "callback.last_error", _error_shown_raw, family="lifecycle", expect="receiver's own words",
           invariant="no API answer carries the receiver's words (`sim.receiver`)"),
]  # fmt: skip
