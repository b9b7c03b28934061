"""Completion notices as Standard Webhooks sends them (pure): which callback URLs a submit may name, the
signature headers, the body, and when the next attempt is due.

A notice is signed over `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256 under the secret's base64
bytes, sent as `webhook-signature: v1,<base64>`; the receiver checks it with one call of any Standard Webhooks
library (`standardwebhooks.Webhook(secret).verify(body, headers)`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

from shared.core.backoff import retry_delay_ms

MAX_CALLBACK_URL = 2048
LOOPBACK_NAMES = frozenset({"localhost"})
FINAL_STATUSES = frozenset({"completed", "completed_with_failures", "cancelled", "expired", "failed"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_callback_url(url: str, *, hosts: frozenset[str], allow_http_loopback: bool) -> str:
    """The URL if a notice may go there, else ValueError saying why (the API answers it as a 400 naming
    `callback_url`): https to a host of CALLBACK_ALLOWED_HOSTS, or plain http to loopback when allowed."""
    if not hosts:
        raise ValueError("callback_url is not accepted here: CALLBACK_ALLOWED_HOSTS names no host")
    if not url or len(url) > MAX_CALLBACK_URL or not url.isascii() or not url.isprintable() or " " in url:
        raise ValueError(f"callback_url must be an absolute URL of 1-{MAX_CALLBACK_URL} printable ASCII characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError("callback_url is not a valid URL") from None
    host = (parts.hostname or "").lower()
    if parts.username is not None or parts.password is not None:
        raise ValueError("callback_url must not carry credentials (user:password@)")
    if parts.fragment:
        raise ValueError("callback_url must not have a #fragment")
    if parts.scheme == "http" and not (allow_http_loopback and is_loopback(host)):
        raise ValueError("callback_url must be https (plain http only to loopback, when CALLBACK_ALLOW_HTTP_LOOPBACK)")
    if parts.scheme not in {"https", "http"} or not host:
        raise ValueError("callback_url must be an https URL with a host")
    if host not in hosts:
        raise ValueError(f"callback_url's host {host!r} is not one of CALLBACK_ALLOWED_HOSTS")
    return url


def secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def signature(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of id.timestamp.body>`."""
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: the id stays the same on every retry (receivers deduplicate by it), the
    timestamp and so the signature are the attempt's own."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature(secret, msg_id, timestamp_s, body),
    }


def message_id(batch_id: str) -> str:
    return f"msg_{batch_id}"


def body(status: dict[str, Any], timestamp_iso: str) -> bytes:
    """`{"type": "batch.<status>", "timestamp", "data": <the batch's status>}`, Standard Webhooks' shape."""
    doc = {"type": f"batch.{status['status']}", "timestamp": timestamp_iso, "data": status}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def next_delay_s(attempt: int, *, base_s: float, max_s: float, u: float) -> float:
    """The wait after failed attempt number `attempt` (1-based): doubling from `base_s`, capped at `max_s`,
    jittered over the upper half so that the notices of one outage do not all come back together."""
    return retry_delay_ms(attempt, base_ms=round(base_s * 1000), max_ms=round(max_s * 1000), jitter=True, u=u) / 1000


def host_of(url: str) -> str:
    """For logs: the host only (a URL's path or query may carry a receiver's token)."""
    return urlsplit(url).hostname or "?"
