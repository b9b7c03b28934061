"""`python -m devstack token TENANT [--role operator]`: a bearer token the local host's Easy Auth accepts; and
`python -m devstack notice-key TENANT`: the key that tenant's completion notices are signed with.

The host verifies it with the development key it was started with (`EASY_AUTH_DEV_KEY` in the environment or
local.settings.json, else the built-in one), so this reads the key the same way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulators.functions.easyauth import DEV_KEY, DEV_KEY_SETTING, token_for
from shared.core.webhooks import tenant_key

ROOT = Path(__file__).resolve().parent.parent


def local_values(app_dir: Path = ROOT) -> dict[str, str]:
    """local.settings.json's Values (empty without the file)."""
    try:
        doc = json.loads((app_dir / "local.settings.json").read_text())
    except (OSError, ValueError):
        return {}
    values = doc.get("Values") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in values.items()} if isinstance(values, dict) else {}


def setting(name: str, environ: Mapping[str, str] | None = None, app_dir: Path = ROOT) -> str:
    """A setting as the local host sees it: the environment wins over local.settings.json."""
    found = (os.environ if environ is None else environ).get(name)
    return found if found is not None else local_values(app_dir).get(name, "")


def dev_token(tenant: str, roles: Sequence[str], lifetime_s: int, environ: Mapping[str, str] | None = None) -> str:
    key = setting(DEV_KEY_SETTING, environ).strip() or DEV_KEY
    return token_for(tenant, roles, key, now_s=time.time(), lifetime_s=lifetime_s)


def tenant_notice_key(tenant: str, environ: Mapping[str, str] | None = None) -> str:
    """The tenant's notice key, derived from CALLBACK_SECRET as the app sets it; ValueError without one."""
    master = setting("CALLBACK_SECRET", environ).strip()
    if not master:
        raise ValueError("CALLBACK_SECRET is not set (environment or local.settings.json): notices are not signed")
    return tenant_key(master, tenant)
