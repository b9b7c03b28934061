"""Completion notices on the receiving end: check a notice's Standard Webhooks signature, and derive a tenant's
notice key from the app's master secret.

The app signs a tenant's notices with that tenant's key, `notice_key(CALLBACK_SECRET, tenant)`; an operator
derives it and hands each tenant's receiver its own (a receiver holding the master could forge any tenant's).
During a rotation a notice carries one signature per key, space-separated: a receiver holding either verifies it.

    from queue_drain_client.notices import verify
    event = verify(tenant_key, body, headers)  # raises InvalidNotice unless signed with it, recently
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

SHARED_TENANT = "default"  # the app's shared tenant, whose notices are signed with the master itself
TOLERANCE_S = 300  # Standard Webhooks' default: a notice older or newer than this is refused (replays)


class InvalidNotice(Exception):
    """Raised when a notice's signature does not verify with the key, or its timestamp is out of tolerance."""


def key_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def notice_key(master: str, tenant: str) -> str:
    """A tenant's notice key: `whsec_` + base64(HMAC-SHA256(the master's bytes, the tenant id in UTF-8))."""
    if tenant == SHARED_TENANT:
        return master
    digest = hmac.new(key_bytes(master), tenant.encode("utf-8"), hashlib.sha256).digest()
    return "whsec_" + base64.b64encode(digest).decode("ascii")


def verify(
    secret: str, body: bytes, headers: Mapping[str, str], *, now_s: float | None = None, tolerance_s: int = TOLERANCE_S
) -> Any:
    """The notice's JSON if one of its `webhook-signature` entries is `v1,` HMAC-SHA256 of
    `{webhook-id}.{webhook-timestamp}.{body}` under `secret`, and its timestamp is within `tolerance_s`."""
    found = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, signatures = (found.get(h, "") for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp.isdigit() and signatures):
        raise InvalidNotice("webhook-id, webhook-timestamp and webhook-signature are required")
    if abs((time.time() if now_s is None else now_s) - int(stamp)) > tolerance_s:
        raise InvalidNotice("webhook-timestamp is out of tolerance")
    try:
        expected = hmac.new(key_bytes(secret), f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    except binascii.Error:
        raise InvalidNotice("the key is not whsec_<base64>") from None
    for entry in signatures.split():
        version, _, sig = entry.partition(",")
        try:
            if version == "v1" and hmac.compare_digest(base64.b64decode(sig), expected):
                return json.loads(body)
        except binascii.Error:
            continue
    raise InvalidNotice("no signature verifies with this key")
