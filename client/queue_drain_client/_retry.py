"""When to try a request again, and how long to wait first (pure: no I/O, no clock; `jitter` is passed in).

As openai-python does: 408, 429 and every 5xx, a 409 that says to retry, and a request that never got an
answer are tried again, `max_retries` times (2 by default), after a `Retry-After` the server gave (up to
60 s) or else a jittered exponential back-off (0.5 s doubling to 8 s, less up to a quarter). A request that is not
safe to repeat (its first attempt may have done something) is tried again only where it surely did nothing: a
connection never made, and a 429."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping

import httpx

INITIAL_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0
RETRYABLE_STATUSES = frozenset({408, 429})
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


def backoff_s(retry: int, jitter: float) -> float:
    """The wait before retry number `retry` (0 for the first): 0.5 s doubling to 8 s, less `jitter` (0 to 1)
    of a quarter of it, so that callers failed together do not come back together."""
    return min(INITIAL_S * 2.0**retry, MAX_BACKOFF_S) * (1.0 - 0.25 * jitter)


def retry_after_s(headers: Mapping[str, str], now_s: float | None = None) -> float | None:
    """The server's `Retry-After` (seconds or an HTTP date; `retry-after-ms` first), or None."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    when = email.utils.parsedate_tz(raw)
    if when is None:
        return None
    return float(email.utils.mktime_tz(when)) - (time.time() if now_s is None else now_s)


def is_retryable(response: httpx.Response, *, safe: bool) -> bool:
    """Whether this answer says to try again (the body must have been read)."""
    status = response.status_code
    if status == 429:
        return True
    if not safe:
        return False
    return status in RETRYABLE_STATUSES or status >= 500 or (status == 409 and conflict_in_flight(response))


def conflict_in_flight(response: httpx.Response) -> bool:
    """A 409 `idempotency_conflict` for a request with the same key still in flight (retry shortly), not for a key
    reused with another request (which names what differs)."""
    try:
        error = json.loads(response.content)["error"]
        return bool(error["code"] == "idempotency_conflict" and "different" not in error)
    except (ValueError, KeyError, TypeError):
        return False


def delay_s(
    outcome: httpx.Response | httpx.TransportError, retry: int, max_retries: int, *, safe: bool, jitter: float
) -> float | None:
    """How long to wait before retry number `retry`, or None to stop here (the outcome is the answer)."""
    if retry >= max_retries:
        return None
    if isinstance(outcome, httpx.TransportError):
        return backoff_s(retry, jitter) if safe or isinstance(outcome, NEVER_SENT) else None
    if not is_retryable(outcome, safe=safe):
        return None
    given = retry_after_s(outcome.headers)
    if given is not None and 0 <= given <= MAX_RETRY_AFTER_S:
        return given
    return backoff_s(retry, jitter)
