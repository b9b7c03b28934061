"""The Entra app registration the function app's Easy Auth accepts tokens for (TENANT_FROM=principal): made or
brought up to date through Microsoft Graph with azd's own sign-in (`azd auth token`; no Azure CLI), its id stored as
azd's AUTH_CLIENT_ID (infra/main.bicep's authClientId). The preprovision hook runs it when AUTH_CLIENT_ID is unset,
so a first `azd up` makes it; it needs the right to register applications in the directory (members have it by
default; where an administrator took it away, they run this once).

Its app roles are what the app reads (shared/core/identity.py): `operator`, and `tenant.<id>` for each tenant named
in QUEUE_DRAIN_TENANTS (comma-separated; more can be added later by running this again). A caller is a client
application (its own registration, with a secret or a certificate) that is granted one `tenant.<id>` role of this
registration, or `operator` (docs/deploying.md "Caller identity"); it asks for a token for `api://<client id>`.
Roles are only ever added here: a role some caller holds cannot be deleted without disabling it first.

Standard library only; `azd` on the PATH and signed in (azd runs this from preprovision).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import uuid
from typing import Any

import smoke  # infra/hooks/smoke.py: the HTTP call and azd's token, standard library only

ROLE_NAMESPACE = uuid.UUID("3c8f1f5e-5d0e-4b6b-9f7a-1d2c3b4a5e6f")  # role ids: the same value, the same id
TENANT = re.compile(r"[A-Za-z0-9._:-]{1,120}")  # shared/core/lanes.py's tenant ids, as short as a role value allows


def app_role(value: str, description: str) -> dict[str, object]:
    return {
        "id": str(uuid.uuid5(ROLE_NAMESPACE, value)),
        "value": value,
        "displayName": value,
        "description": description,
        "allowedMemberTypes": ["Application", "User"],
        "isEnabled": True,
    }


def app_roles(tenants: list[str], existing: list[dict[str, object]] | None = None) -> list[dict[str, object]]:
    """The roles the registration should hold: those it has, `operator`, and `tenant.<id>` per tenant."""
    for tenant in tenants:
        if not TENANT.fullmatch(tenant):
            raise ValueError(f"{tenant!r} is not a tenant id (1-120 of A-Z a-z 0-9 . _ : -)")
    wanted = [app_role("operator", "Acts across tenants: every batch, the queues, the parked chunks, replays")]
    wanted += [app_role(f"tenant.{t}", f"Submits and reads the batches of tenant {t}") for t in tenants]
    have = list(existing or [])
    values = {str(r.get("value")) for r in have}
    return have + [r for r in wanted if r["value"] not in values]


GRAPH = os.environ.get("GRAPH_ENDPOINT", "https://graph.microsoft.com").rstrip("/")


def graph(token: str, method: str, path: str, body: dict[str, object] | None = None) -> Any:
    """One Microsoft Graph v1.0 call; RuntimeError naming what Graph refused."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        return smoke.call(f"{GRAPH}/v1.0{path}", method=method, headers=headers, body=data)
    except (smoke.Failed, smoke.NotYet) as e:
        raise RuntimeError(f"Microsoft Graph: {e}") from e


def ensure(env_name: str, tenants: list[str], token: str) -> str:
    """The registration's client id, made if it does not exist (found by its display name)."""
    name = f"queue-drain-{env_name}"
    query = urllib.parse.quote(f"displayName eq '{name}'")
    found = graph(token, "GET", f"/applications?$filter={query}&$select=id,appId,appRoles")["value"]
    if found:
        app = found[0]
    else:
        app = graph(token, "POST", "/applications", {"displayName": name, "signInAudience": "AzureADMyOrg"})
    roles = app_roles(tenants, list(app.get("appRoles") or []))
    graph(
        token, "PATCH", f"/applications/{app['id']}", {"identifierUris": [f"api://{app['appId']}"], "appRoles": roles}
    )
    query = urllib.parse.quote(f"appId eq '{app['appId']}'")
    if not graph(token, "GET", f"/servicePrincipals?$filter={query}&$select=id")["value"]:
        graph(token, "POST", "/servicePrincipals", {"appId": app["appId"]})
    return str(app["appId"])


def register() -> str:
    """Make or update the registration and store its id in the azd environment; its client id."""
    tenants = [t.strip() for t in os.environ.get("QUEUE_DRAIN_TENANTS", "").split(",") if t.strip()]
    token = smoke.azd_token(f"{GRAPH}/.default")
    app_id = ensure(os.environ.get("AZURE_ENV_NAME", "dev"), tenants, token)
    subprocess.run(["azd", "env", "set", "AUTH_CLIENT_ID", app_id], check=True)
    roles = ", ".join(["operator", *(f"tenant.{t}" for t in tenants)])
    print(f"app_registration: AUTH_CLIENT_ID={app_id}; roles {roles}")
    return app_id


def main() -> None:
    register()


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError, smoke.Failed) as e:
        print(f"app_registration: {e}", file=sys.stderr)
        sys.exit(1)
