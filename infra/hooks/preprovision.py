"""azd's preprovision hook: refuse, before anything is created, what ARM would take wrongly or silently.

APP_SETTINGS (infra/main.bicep's `appSettings`) is `NAME=value;NAME=value` or a JSON object of strings. In the
pair form a value cannot hold `;` (it would split), a pair without `=` would be dropped, and a repeated name would
keep one of its values without a word: each is refused here with what to write instead.

Standard library only (it runs wherever azd runs); azd passes its environment values as environment variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import app_registration  # infra/hooks/: the Entra app registration, made with azd's sign-in
import smoke


def problems(app_settings: str) -> list[str]:
    """What is wrong with an APP_SETTINGS value; empty if nothing is."""
    text = app_settings.strip()
    if not text:
        return []
    if text.startswith("{"):
        try:
            doc = json.loads(text, object_pairs_hook=list)
        except ValueError as e:
            return [f"APP_SETTINGS is not valid JSON: {e}"]
        if not isinstance(doc, list):
            return ["APP_SETTINGS in its JSON form must be one object of NAME: value"]
        pairs = [(str(k), v) for k, v in doc]
        found = [f"APP_SETTINGS: {k} must be a string" for k, v in pairs if not isinstance(v, str)]
    else:
        pairs, found = [], []
        for part in text.split(";"):
            if not part.strip():
                continue
            if "=" not in part:
                found.append(f"APP_SETTINGS: {part.strip()!r} has no '=' (a value holding ';' needs the JSON form)")
                continue
            name, _, value = part.partition("=")
            pairs.append((name.strip(), value))
    names = [name for name, _ in pairs]
    found += [f"APP_SETTINGS: the name {n!r} is empty or holds spaces" for n in names if not n or " " in n]
    found += [f"APP_SETTINGS names {n} more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    return found


def identity_problems(environ: dict[str, str]) -> list[str]:
    """TENANT_FROM=principal (the default) needs the app registration Easy Auth accepts tokens for: made here
    through Microsoft Graph with azd's sign-in when AUTH_CLIENT_ID is unset (infra/hooks/app_registration.py)."""
    tenant_from = environ.get("TENANT_FROM", "principal").strip() or "principal"
    if tenant_from not in {"principal", "header"}:
        return [f"TENANT_FROM must be principal or header, not {tenant_from!r}"]
    if tenant_from == "principal" and not environ.get("AUTH_CLIENT_ID", "").strip():
        try:
            app_registration.register()
        except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError, smoke.Failed) as e:
            return [
                f"TENANT_FROM is principal (the default) and the app registration could not be made ({e}): have "
                "someone allowed to register applications run `python3 infra/hooks/app_registration.py`, or "
                "`azd env set TENANT_FROM header` for one trusted caller without authentication"
            ]
    return []


def main() -> None:
    found = problems(os.environ.get("APP_SETTINGS", "")) + identity_problems(dict(os.environ))
    for problem in found:
        print(f"preprovision: {problem}", file=sys.stderr)
    if found:
        sys.exit(1)
    print("preprovision: APP_SETTINGS is well formed; caller identity is configured")


if __name__ == "__main__":
    main()
