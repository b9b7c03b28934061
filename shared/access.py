"""Who may do what: the caller of a request (`shared.core.identity`, with the app's settings) and the rules a
route applies beyond "its own tenant's batches" (which the ops modules apply as they read a manifest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import runtime
from shared.core import identity
from shared.core.errors import Forbidden
from shared.core.identity import Caller
from shared.ops import lifecycle
from shared.services import Services


def caller(headers: Mapping[str, str] | None) -> Caller:
    """Who is calling (`shared.core.identity`): 401 without a principal and 403 without a tenant, when
    TENANT_FROM=principal; the one trusted caller otherwise."""
    settings = runtime.services().settings  # the same instance settings the rest of the call uses
    return identity.caller_of(headers or {}, tenant_from=settings.tenant_from, claim=settings.tenant_claim)


async def replay_scope(services: Services, who: Caller, request: Mapping[str, Any]) -> None:
    """A tenant's caller replays its own batch's parked chunks, in the foreground: the request must name the
    batch (another tenant's answers the 404 of an unknown id); anything wider is the operator's."""
    if who.operator:
        return
    if (
        set(request) - {"batch_id", "limit", "rate", "background"}
        or "batch_id" not in request
        or request.get("background")
    ):
        raise Forbidden(
            'a tenant replays one of its batches: {"batch_id": ...}; message ids, every batch and background '
            f"replays need the {identity.OPERATOR_ROLE!r} role",
            role=identity.OPERATOR_ROLE,
        )
    await lifecycle.read(services, request["batch_id"], who)
