"""App Service Authentication (Easy Auth) as the local host plays it, for an app with `TENANT_FROM=principal`.

On Azure the platform validates the caller's Entra ID token before the app runs, drops any `X-MS-CLIENT-PRINCIPAL*`
header the client sent and sets its own (base64 JSON: `auth_typ`, `claims` [{typ, val}], `name_typ`,
`role_typ`); a request without a valid token gets 401 ("return 401" as the unauthenticated action). Here the
token is an HS256 JWT signed with a local development key (`EASY_AUTH_DEV_KEY`, or the built-in one below: it
protects nothing but a laptop), made by `python -m devstack token TENANT [--role operator]`. Its claims become
the principal's: each `roles` value one `roles` claim, as Entra's app roles arrive.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEV_KEY_SETTING = "EASY_AUTH_DEV_KEY"
DEV_KEY = "queue-drain-local-development-key"  # local only: a token signed with it means nothing on Azure
ISSUER = "queue-drain-local-easy-auth"
PRINCIPAL_PREFIX = "x-ms-client-principal"
# Routes the deployed template excludes too (globalValidation.excludedPaths): the anonymous OpenAPI document and
# the deploy smoke test's probe (function key only: it reads no tenant's batch).
UNPROTECTED = ("openapi.json", "probes")
TENANT_ROLE_PREFIX = "tenant."  # the app's default TENANT_CLAIM=roles reads `tenant.<id>` app roles


class InvalidToken(Exception):
    """Raised when a bearer token is missing, malformed, badly signed or expired."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(claims: Mapping[str, Any], key: str) -> str:
    """An HS256 JWT of `claims`."""
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = b64url(json.dumps(dict(claims), separators=(",", ":")).encode())
    mac = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(mac)}"


def token_for(tenant: str, roles: Sequence[str], key: str, *, now_s: float, lifetime_s: int = 3600) -> str:
    """A token for a caller of `tenant` (its app role `tenant.<tenant>`) holding `roles` besides."""
    claims = {
        "iss": ISSUER,
        "sub": f"local-{tenant}",
        "name": tenant,
        "tenant": tenant,
        "roles": [f"{TENANT_ROLE_PREFIX}{tenant}", *roles],
        "iat": int(now_s),
        "exp": int(now_s) + lifetime_s,
    }
    return sign(claims, key)


def verify(token: str, key: str, *, now_s: float) -> dict[str, Any]:
    """The token's claims if it is an HS256 JWT signed with `key` and not expired; else InvalidToken."""
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("not a JWT (three dot-separated parts)")
    try:
        head, claims = json.loads(unb64url(parts[0])), json.loads(unb64url(parts[1]))
        mac = unb64url(parts[2])
    except (binascii.Error, ValueError):
        raise InvalidToken("not a JWT (base64url JSON)") from None
    if not isinstance(head, dict) or head.get("alg") != "HS256" or not isinstance(claims, dict):
        raise InvalidToken("only HS256 tokens signed with the local development key are accepted")
    expected = hmac.new(key.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise InvalidToken("bad signature")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool) or exp <= now_s:
        raise InvalidToken("expired (or no exp)")
    return claims


def principal(claims: Mapping[str, Any]) -> dict[str, Any]:
    """The App Service principal of a token's claims: one {typ, val} per value (a list gives several)."""
    pairs = []
    for typ, value in claims.items():
        for one in value if isinstance(value, list) else [value]:
            pairs.append({"typ": typ, "val": str(one)})
    return {"auth_typ": "aad", "claims": pairs, "name_typ": "name", "role_typ": "roles"}


def principal_headers(claims: Mapping[str, Any]) -> dict[str, str]:
    encoded = base64.b64encode(json.dumps(principal(claims), separators=(",", ":")).encode()).decode("ascii")
    return {
        "X-MS-CLIENT-PRINCIPAL": encoded,
        "X-MS-CLIENT-PRINCIPAL-ID": str(claims.get("sub", "")),
        "X-MS-CLIENT-PRINCIPAL-NAME": str(claims.get("name", "")),
        "X-MS-CLIENT-PRINCIPAL-IDP": "aad",
    }


@dataclass(frozen=True)
class EasyAuth:
    """The gate in front of the app's routes: the headers to invoke with, or a reason to answer 401."""

    key: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EasyAuth | None:
        """On when the app reads its tenant from the principal (`TENANT_FROM=principal`), off otherwise."""
        if environ.get("TENANT_FROM", "").strip().lower() != "principal":
            return None
        return cls(environ.get(DEV_KEY_SETTING, "").strip() or DEV_KEY)

    def admit(self, headers: Mapping[str, str], now_s: float | None = None) -> dict[str, str]:
        """The request's headers without any client-sent principal header, with the token's principal set;
        InvalidToken when it has no valid bearer token."""
        kept = {k: v for k, v in headers.items() if not k.lower().startswith(PRINCIPAL_PREFIX)}
        authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise InvalidToken("no bearer token")
        claims = verify(token.strip(), self.key, now_s=time.time() if now_s is None else now_s)
        return kept | principal_headers(claims)


def unauthorized_body(reason: str) -> bytes:
    """The 401's JSON body, in the app's error shape, naming why."""
    message = f"this app needs a caller identity: send Authorization: Bearer <token> ({reason})"
    return json.dumps({"error": {"code": "unauthenticated", "message": message}}).encode()
