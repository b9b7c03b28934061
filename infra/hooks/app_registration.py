"""The Entra app registration the function app's Easy Auth accepts tokens for (TENANT_FROM=principal): made or
brought up to date with the Azure CLI, its id stored as azd's AUTH_CLIENT_ID (infra/main.bicep's authClientId).

Its app roles are what the app reads (shared/core/identity.py): `operator`, and `tenant.<id>` for each tenant named
in QUEUE_DRAIN_TENANTS (comma-separated; more can be added later by running this again). A caller is a client
application (its own registration, with a secret or a certificate) that is granted one `tenant.<id>` role of this
registration, or `operator` (docs/deploying.md "Caller identity"); it asks for a token for `api://<client id>`.
Roles are only ever added here: a role some caller holds cannot be deleted without disabling it first.

Standard library only; `az` signed in to the directory, `azd` on the PATH (azd runs this from preprovision).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

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


def az(*args: str) -> str:
    done = subprocess.run(["az", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"az {' '.join(args[:3])} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def ensure(env_name: str, tenants: list[str]) -> str:
    """The registration's client id, made if it does not exist (found by its display name)."""
    name = f"queue-drain-{env_name}"
    app_id = az("ad", "app", "list", "--display-name", name, "--query", "[0].appId", "--output", "tsv")
    if not app_id:
        app_id = az("ad", "app", "create", "--display-name", name, "--sign-in-audience", "AzureADMyOrg",
                    "--query", "appId", "--output", "tsv")  # fmt: skip
        az("ad", "app", "update", "--id", app_id, "--identifier-uris", f"api://{app_id}")
    existing = json.loads(az("ad", "app", "show", "--id", app_id, "--query", "appRoles", "--output", "json") or "[]")
    az("ad", "app", "update", "--id", app_id, "--app-roles", json.dumps(app_roles(tenants, existing)))
    if not az("ad", "sp", "list", "--filter", f"appId eq '{app_id}'", "--query", "[0].id", "--output", "tsv"):
        az("ad", "sp", "create", "--id", app_id)
    return app_id


def main() -> None:
    tenants = [t.strip() for t in os.environ.get("QUEUE_DRAIN_TENANTS", "").split(",") if t.strip()]
    app_id = ensure(os.environ.get("AZURE_ENV_NAME", "dev"), tenants)
    subprocess.run(["azd", "env", "set", "AUTH_CLIENT_ID", app_id], check=True)
    roles = ", ".join(["operator", *(f"tenant.{t}" for t in tenants)])
    print(f"app_registration: AUTH_CLIENT_ID={app_id}; roles {roles}")


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as e:
        print(f"app_registration: {e}", file=sys.stderr)
        sys.exit(1)
