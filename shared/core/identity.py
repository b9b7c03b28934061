"""Who is calling, and so which tenant a request acts for (pure).

With `TENANT_FROM=principal` the caller is the principal App Service Authentication (Easy Auth) put in
`X-MS-CLIENT-PRINCIPAL`: base64 of `{"auth_typ", "claims": [{"typ", "val"}], "name_typ", "role_typ"}`. The
platform validates the token and sets that header; clients cannot set it there (the local host strips and sets
it the same way). The tenant is a claim of it (`TENANT_CLAIM`): with `roles`, the default, the principal's app
role whose value starts with `tenant.` (`tenant.acme` is tenant `acme`); with any other claim name, that
claim's value as is. A principal holding the `operator` role may act across tenants.

With `TENANT_FROM=header` the app trusts its one caller: the tenant is whatever the request names
(`X-Tenant`, `?tenant=`), and that caller sees every tenant's batches, as an operator does.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from shared.core.errors import Forbidden, Unauthenticated
from shared.core.lanes import DEFAULT_TENANT, checked_tenant

PRINCIPAL_HEADER = "x-ms-client-principal"
OPERATOR_ROLE = "operator"
ROLES_CLAIM = "roles"
TENANT_ROLE_PREFIX = "tenant."
MAX_PRINCIPAL_BYTES = 16 * 1024  # a principal of a few dozen claims is a few KiB


class TenantFrom(str, Enum):
    """Where a request's tenant comes from (`TENANT_FROM`)."""

    PRINCIPAL = "principal"
    HEADER = "header"


@dataclass(frozen=True)
class Caller:
    """The tenant a request acts for (None: an operator who named none) and whether it may see every tenant."""

    tenant: str | None
    operator: bool = False

    def sees(self, tenant: str) -> bool:
        return self.operator or tenant == self.tenant

    def needs_operator(self, what: str) -> None:
        if not self.operator:
            raise Forbidden(f"{what} shows every tenant: it needs the {OPERATOR_ROLE!r} role", role=OPERATOR_ROLE)


HEADER_CALLER = Caller(None, operator=True)  # TENANT_FROM=header: the one trusted caller


@dataclass(frozen=True)
class Principal:
    """The decoded App Service principal: its claims in order, and the claim type its roles arrive under."""

    claims: tuple[tuple[str, str], ...]
    role_typ: str = ROLES_CLAIM

    def values(self, typ: str) -> list[str]:
        return [val for t, val in self.claims if t == typ]

    def roles(self) -> list[str]:
        types = {self.role_typ, ROLES_CLAIM}
        return [val for t, val in self.claims if t in types]


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name in any case (the worker passes names as the framework gives them)."""
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)


def decode_principal(encoded: str) -> Principal:
    """`X-MS-CLIENT-PRINCIPAL`'s App Service shape; Unauthenticated if it is not one."""
    if len(encoded) > MAX_PRINCIPAL_BYTES:
        raise Unauthenticated("X-MS-CLIENT-PRINCIPAL is too long to be a principal")
    try:
        doc: Any = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        raise Unauthenticated("X-MS-CLIENT-PRINCIPAL is not base64 of a JSON principal") from None
    claims = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(claims, list) or not all(
        isinstance(c, dict) and isinstance(c.get("typ"), str) and isinstance(c.get("val"), str) for c in claims
    ):
        raise Unauthenticated('X-MS-CLIENT-PRINCIPAL has no "claims" list of {"typ", "val"}')
    role_typ = doc.get("role_typ")
    return Principal(
        tuple((c["typ"], c["val"]) for c in claims), role_typ if isinstance(role_typ, str) else ROLES_CLAIM
    )


def tenants_of(principal: Principal, claim: str) -> list[str]:
    """The tenant values the principal holds under `claim` (TENANT_CLAIM)."""
    if claim == ROLES_CLAIM:
        prefixed = [r for r in principal.roles() if r.startswith(TENANT_ROLE_PREFIX)]
        return [r.removeprefix(TENANT_ROLE_PREFIX) for r in prefixed]
    return principal.values(claim)


def caller_of(headers: Mapping[str, str], *, tenant_from: TenantFrom, claim: str) -> Caller:
    """The caller of a request. With `principal`: 401 without a principal, 403 for one that names no tenant (or
    several) and is no operator."""
    if tenant_from is TenantFrom.HEADER:
        return HEADER_CALLER
    encoded = header(headers, PRINCIPAL_HEADER)
    if not encoded:
        raise Unauthenticated("this app needs a caller identity (App Service Authentication): send a bearer token")
    principal = decode_principal(encoded)
    operator = OPERATOR_ROLE in principal.roles()
    found = sorted(set(tenants_of(principal, claim)))
    if len(found) > 1:
        raise Forbidden(f"the caller's {claim!r} claim names {len(found)} tenants; a caller acts for one")
    if not found:
        if operator:
            return Caller(None, operator=True)
        raise Forbidden(f"the caller's principal names no tenant (claim {claim!r})", claim=claim)
    try:
        tenant = checked_tenant(found[0])
    except ValueError as e:
        raise Forbidden(f"the caller's tenant claim is not a tenant id: {e}") from None
    if tenant == DEFAULT_TENANT:  # its notices are signed with the master secret (shared.core.webhooks)
        raise Forbidden(f"no caller is tenant {DEFAULT_TENANT!r}: it is the shared tenant of TENANT_FROM=header")
    return Caller(tenant, operator)


def submit_tenant(caller: Caller, asked: str | None, default: str) -> str:
    """The tenant a submit stores into: the one it asks for (`X-Tenant`) when the caller may act for it (the
    trusted header caller, an operator, or its own), else the caller's own; 403 for another tenant."""
    if asked is None:
        if caller.tenant is None and not caller.operator:
            raise Forbidden("the caller names no tenant")
        return caller.tenant or default
    if caller.operator or asked == caller.tenant:
        return asked
    raise Forbidden(f"a caller of tenant {caller.tenant!r} submits as its own tenant, not {asked!r}")
