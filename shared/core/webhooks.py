"""Completion notices as Standard Webhooks sends them (pure): which callback URLs a submit may name, the
signature headers, the body, and when the next attempt is due.

A notice is signed over `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256 under the secret's base64
bytes, sent as `webhook-signature: v1,<base64>`; the receiver checks it with one call of any Standard Webhooks
library (`standardwebhooks.Webhook(secret).verify(body, headers)`).

Each tenant's notices are signed with the tenant's own key, derived from the master secret (`CALLBACK_SECRET`):
`whsec_` + base64(HMAC-SHA256(the master's base64 bytes, the tenant id in UTF-8)), so a receiver of one tenant
holds nothing that signs another's. The shared tenant (`default`, the one trusted caller's with
TENANT_FROM=header; no principal may claim it) signs with the master itself, as before. While a previous master
is set (`CALLBACK_SECRET_PREVIOUS`, a rotation), a notice carries two signatures, space-separated, as Standard
Webhooks allows: a receiver holding either key verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any
from urllib.parse import urlsplit

from shared.core.backoff import retry_delay_ms
from shared.core.origins import DEFAULT_PORTS, Origin, is_loopback, origin, show

MAX_CALLBACK_URL = 2048
FINAL_STATUSES = frozenset({"completed", "completed_with_failures", "cancelled", "expired", "failed"})
# What a URL may hold as it is (RFC 3986): anything else must be percent-encoded, and a `%` starts an escape.
URL_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:/?#\[\]@%]*")
BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def checked_callback_url(url: str, *, origins: frozenset[Origin], allow_http_loopback: bool) -> str:
    """The URL if a notice may go there, else ValueError saying why (the API answers it as a 400 naming
    `callback_url`): https to an origin (scheme, host, port) of CALLBACK_ALLOWED_HOSTS, or plain http to loopback
    when allowed; and a URL that is sent exactly as given, byte for byte (nothing in it would be re-encoded)."""
    if not origins:
        raise ValueError("callback_url is not accepted here: CALLBACK_ALLOWED_HOSTS names no host")
    if not url or len(url) > MAX_CALLBACK_URL or not url.isascii() or not url.isprintable() or " " in url:
        raise ValueError(f"callback_url must be an absolute URL of 1-{MAX_CALLBACK_URL} printable ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("callback_url is not a valid URL") from None
    host = (parts.hostname or "").lower()
    if parts.username is not None or parts.password is not None:
        raise ValueError("callback_url must not carry credentials (user:password@)")
    if parts.fragment or url.endswith("#"):
        raise ValueError("callback_url must not have a #fragment")
    if parts.scheme == "http" and not (allow_http_loopback and is_loopback(host)):
        raise ValueError("callback_url must be https (plain http only to loopback, when CALLBACK_ALLOW_HTTP_LOOPBACK)")
    if parts.scheme not in DEFAULT_PORTS or not host:
        raise ValueError("callback_url must be an https URL with a host")
    if not URL_CHARS.fullmatch(url):
        raise ValueError("callback_url has characters a URL must percent-encode (it is sent as given)")
    if BAD_ESCAPE.search(url):
        raise ValueError("callback_url has a % not followed by two hex digits (it is sent as given)")
    if not parts.path.startswith("/"):
        raise ValueError("callback_url must have a path, at least / (it is sent as given)")
    if origin(parts.scheme, host, port) not in origins:
        raise ValueError(
            f"callback_url's origin {show(origin(parts.scheme, host, port))} is not one of CALLBACK_ALLOWED_HOSTS"
        )
    return url


SHARED_TENANT = "default"  # shared.core.lanes.DEFAULT_TENANT: signed with the master itself


def tenant_key(master: str, tenant: str) -> str:
    """The key a tenant's notices are signed with (a receiver's `whsec_` secret), derived from the master."""
    if tenant == SHARED_TENANT:
        return master
    digest = hmac.new(secret_bytes(master), tenant.encode("utf-8"), hashlib.sha256).digest()
    return "whsec_" + base64.b64encode(digest).decode("ascii")


def keys(tenant: str, master: str, previous: str = "") -> list[str]:
    """The keys a tenant's notice is signed with: under the master, and under the previous one while it is set."""
    return [tenant_key(m, tenant) for m in (master, previous) if m]


def secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def signature(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of id.timestamp.body>`."""
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(secrets: str | list[str], msg_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: the id stays the same on every retry (receivers deduplicate by it), the
    timestamp and so the signature are the attempt's own; one signature per key, space-separated."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": " ".join(
            signature(one, msg_id, timestamp_s, body) for one in ([secrets] if isinstance(secrets, str) else secrets)
        ),
    }


def message_id(batch_id: str) -> str:
    return f"msg_{batch_id}"


def body(status: dict[str, Any], timestamp_iso: str) -> bytes:
    """`{"type": "batch.<status>", "timestamp", "data": <the batch's status>}`, Standard Webhooks' shape."""
    doc = {"type": f"batch.{status['status']}", "timestamp": timestamp_iso, "data": status}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


TIMEOUT_STEPS = 2  # an attempt that timed out doubles the wait twice more than a failure that was answered
TIMEOUT_CAP = 4  # and lets the waits after it grow to 4 times CALLBACK_RETRY_MAX_S


def next_delay_s(attempt: int, *, base_s: float, max_s: float, u: float, timeouts: int = 0) -> float:
    """The wait after failed attempt number `attempt` (1-based): doubling from `base_s`, capped at `max_s`,
    jittered over the upper half so that the notices of one outage do not all come back together. Each of the
    `timeouts` attempts that got no answer within CALLBACK_TIMEOUT_S doubles it twice more, up to TIMEOUT_CAP times
    `max_s`: a receiver slower than the timeout most likely got the notice each time, so it is sent less often."""
    steps = attempt + TIMEOUT_STEPS * timeouts
    cap = max_s * (TIMEOUT_CAP if timeouts else 1)
    return retry_delay_ms(steps, base_ms=round(base_s * 1000), max_ms=round(cap * 1000), jitter=True, u=u) / 1000


def host_of(url: str) -> str:
    """For logs: the host only (a URL's path or query may carry a receiver's token)."""
    return urlsplit(url).hostname or "?"
