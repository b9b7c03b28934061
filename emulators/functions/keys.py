"""Function keys, kept the way the Functions host's file-based secret storage keeps them.

With the app setting `AzureWebJobsSecretStorageType=files` the host reads its keys from the folder
`FUNCTIONS_SECRETS_PATH` (default `$HOME/data/Functions/secrets`, as on App Service):

- `host.json`: `{"masterKey": {"name": "master", "value": ..., "encrypted": false},
  "functionKeys": [{"name": "default", "value": ..., "encrypted": false}], "systemKeys": [...]}`
- `<function name>.json`: `{"keys": [{"name": "default", "value": ..., "encrypted": false}]}`

A missing `host.json` is created with a new master key and a `default` host key, as the real host
does on first start. Without the setting no key is checked (Core Tools behaves so locally).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.functions.errors import ConfigError

log = logging.getLogger(__name__)

STORAGE_TYPE_SETTING = "AzureWebJobsSecretStorageType"
SECRETS_PATH_SETTING = "FUNCTIONS_SECRETS_PATH"
HOST_SECRETS_FILE = "host.json"
KEY_HEADER = "x-functions-key"
KEY_QUERY = "code"
ANONYMOUS, FUNCTION, ADMIN = "anonymous", "function", "admin"
KEY_BYTES = 40


@dataclass(frozen=True)
class Keys:
    """The keys one host start read: the master key, host keys, and each function's own keys."""

    folder: Path
    master: str
    host: tuple[str, ...] = ()
    functions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def authorizes(self, auth_level: str, function_name: str, presented: str | None) -> bool:
        """Anonymous needs nothing; function needs a key of the function, a host key or the master key;
        admin (and any level this host does not know) needs the master key."""
        level = auth_level.lower()
        if level == ANONYMOUS:
            return True
        if not presented:
            return False
        if level == FUNCTION:
            accepted = (*self.functions.get(function_name.lower(), ()), *self.host, self.master)
            return any_matches(presented, accepted)
        return any_matches(presented, (self.master,))


def any_matches(presented: str, accepted: Iterable[str]) -> bool:
    """Constant-time comparison against every accepted key (no early exit that would leak which)."""
    given = presented.encode("utf-8", "surrogateescape")
    found = False
    for key in accepted:
        found |= hmac.compare_digest(given, key.encode("utf-8"))
    return found


def presented_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The key a request carries: the `x-functions-key` header first, then `?code=`, as the host looks."""
    for name, value in headers.items():
        if name.lower() == KEY_HEADER:
            return value
    return query.get(KEY_QUERY)


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


def secrets_folder(environ: Mapping[str, str]) -> Path:
    configured = environ.get(SECRETS_PATH_SETTING, "").strip()
    if configured:
        return Path(configured)
    return Path(environ.get("HOME") or Path.home()) / "data" / "Functions" / "secrets"


def load_keys(environ: Mapping[str, str], function_names: Iterable[str]) -> Keys | None:
    """The configured keys, or None when key checking is off (no `AzureWebJobsSecretStorageType=files`)."""
    storage = environ.get(STORAGE_TYPE_SETTING, "").strip().lower()
    if not storage:
        return None
    if storage != "files":
        raise ConfigError(
            f"{STORAGE_TYPE_SETTING}={storage!r} is not supported by the local host: use 'files' "
            f"(keys in {SECRETS_PATH_SETTING}) or leave it unset to accept requests without keys"
        )
    folder = secrets_folder(environ)
    host_file = folder / HOST_SECRETS_FILE
    if not host_file.exists():
        write_new_host_secrets(host_file)
    doc = read_secrets(host_file)
    master = key_value(doc.get("masterKey"), f"{host_file}: masterKey")
    host = tuple(key_value(k, f"{host_file}: functionKeys[{i}]") for i, k in enumerate(list_of(doc, "functionKeys")))
    functions = {name.lower(): function_keys(folder, name) for name in function_names}
    return Keys(folder, master, host, {name: keys for name, keys in functions.items() if keys})


def function_keys(folder: Path, name: str) -> tuple[str, ...]:
    path = folder / f"{name}.json"
    if not path.exists():
        lowered = folder / f"{name.lower()}.json"
        if not lowered.exists():
            return ()
        path = lowered
    doc = read_secrets(path)
    return tuple(key_value(k, f"{path}: keys[{i}]") for i, k in enumerate(list_of(doc, "keys")))


def write_new_host_secrets(path: Path) -> None:
    """First start: a master key and a `default` host key, readable by this user only. Values are never logged."""
    doc = {
        "masterKey": {"name": "master", "value": new_key(), "encrypted": False},
        "functionKeys": [{"name": "default", "value": new_key(), "encrypted": False}],
        "systemKeys": [],
        "source": "runtime",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(doc, out, indent=2)
    log.info("Generated a master key and a default host key in %s", path)


def read_secrets(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"secrets file {path} cannot be read: {type(e).__name__}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"secrets file {path} must be a JSON object")
    return doc


def list_of(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be a list of keys")
    return value


def key_value(entry: Any, where: str) -> str:
    """One `{"name", "value", "encrypted"}` entry's value; encrypted keys need App Service's decryption key."""
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), str) or not entry["value"]:
        raise ConfigError(f"{where} must be an object with a non-empty string 'value'")
    if entry.get("encrypted"):
        raise ConfigError(f'{where} is encrypted; the local host reads only plain keys ("encrypted": false)')
    return str(entry["value"])
