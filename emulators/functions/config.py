"""host.json and local.settings.json, read the way Core Tools and the Functions host read them."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulators.functions.errors import ConfigError

log = logging.getLogger(__name__)

HOST_OVERRIDE_PREFIX = "AzureFunctionsJobHost__"
HOST_ID_SETTING = "AzureFunctionsWebHost__hostid"
BODY_LIMIT_SETTING = "FUNCTIONS_REQUEST_BODY_SIZE_LIMIT"
DEFAULT_BODY_LIMIT_BYTES = 100 * 1024 * 1024
# Core Tools runs without a hosting plan; the Dedicated/Premium default is the closest match.
DEFAULT_FUNCTION_TIMEOUT_S = 30 * 60.0
HOST_ID_MAX_CHARS = 32

_TIMESPAN = re.compile(r"^(?:(?P<days>\d+)\.)?(?P<h>\d{1,2}):(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d+)?)$")
_SETTING_REF = re.compile(r"%([^%]+)%")


def parse_timespan(text: str) -> float:
    """Seconds in a .NET TimeSpan string such as "00:05:00" or "1.02:00:00"."""
    match = _TIMESPAN.match(text.strip())
    if match is None:
        raise ConfigError(f"{text!r} is not a TimeSpan (expected hh:mm:ss)")
    days = int(match["days"] or 0)
    return days * 86400 + int(match["h"]) * 3600 + int(match["m"]) * 60 + float(match["s"])


def format_timespan(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def resolve_setting_refs(value: str, settings: Mapping[str, str]) -> str:
    """Replace each %NAME% with the app setting NAME, as the host does for binding values."""

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in settings:
            raise ConfigError(f"'%{name}%' does not resolve to a value: app setting {name} is not set")
        return settings[name]

    return _SETTING_REF.sub(lookup, value)


@dataclass(frozen=True)
class ServiceBusOptions:
    """`extensions.serviceBus` (extension 5.x flat keys) with the extension's defaults."""

    prefetch_count: int = 0
    auto_complete_messages: bool = True
    max_auto_lock_renewal_duration_s: float = 300.0
    max_concurrent_calls: int = 16

    @classmethod
    def from_json(cls, section: Mapping[str, Any]) -> ServiceBusOptions:
        default = cls()
        return cls(
            prefetch_count=int(section.get("prefetchCount", default.prefetch_count)),
            auto_complete_messages=_as_bool(section.get("autoCompleteMessages", default.auto_complete_messages)),
            max_auto_lock_renewal_duration_s=_timespan_or(
                section, "maxAutoLockRenewalDuration", default.max_auto_lock_renewal_duration_s
            ),
            max_concurrent_calls=int(section.get("maxConcurrentCalls", default.max_concurrent_calls)),
        )


@dataclass(frozen=True)
class SingletonOptions:
    """host.json `singleton`: how long the timer listener lease lasts and how often others retry it."""

    listener_lock_period_s: float = 60.0
    listener_lock_recovery_polling_interval_s: float = 60.0

    @classmethod
    def from_json(cls, section: Mapping[str, Any]) -> SingletonOptions:
        default = cls()
        return cls(
            listener_lock_period_s=_timespan_or(section, "listenerLockPeriod", default.listener_lock_period_s),
            listener_lock_recovery_polling_interval_s=_timespan_or(
                section,
                "listenerLockRecoveryPollingInterval",
                default.listener_lock_recovery_polling_interval_s,
            ),
        )


@dataclass(frozen=True)
class HostOptions:
    """What the local host takes from host.json (after AzureFunctionsJobHost__ overrides)."""

    route_prefix: str = "api"
    function_timeout_s: float | None = DEFAULT_FUNCTION_TIMEOUT_S
    service_bus: ServiceBusOptions = ServiceBusOptions()
    singleton: SingletonOptions = SingletonOptions()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> HostOptions:
        extensions = doc.get("extensions") or {}
        http = extensions.get("http") or {}
        return cls(
            route_prefix=str(http.get("routePrefix", "api")).strip("/"),
            function_timeout_s=_function_timeout(doc.get("functionTimeout")),
            service_bus=ServiceBusOptions.from_json(extensions.get("serviceBus") or {}),
            singleton=SingletonOptions.from_json(doc.get("singleton") or {}),
        )


def _function_timeout(value: object) -> float | None:
    if value is None:
        return DEFAULT_FUNCTION_TIMEOUT_S
    if str(value).strip() == "-1":
        return None
    return parse_timespan(str(value))


def _timespan_or(section: Mapping[str, Any], key: str, default_s: float) -> float:
    value = section.get(key)
    return default_s if value in (None, "") else parse_timespan(str(value))


def _as_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "1", "yes"}


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError as e:
        raise ConfigError(f"{what} not found at {path}") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} at {path} is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{what} at {path} must be a JSON object")
    return doc


def apply_host_overrides(doc: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """AzureFunctionsJobHost__a__b=value overrides host.json's a.b, as app settings do in Azure."""
    for key, value in environ.items():
        if not key.startswith(HOST_OVERRIDE_PREFIX):
            continue
        path = [part for part in key[len(HOST_OVERRIDE_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = doc
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    return doc


def load_host_options(app_dir: Path, environ: Mapping[str, str]) -> HostOptions:
    doc = read_json(app_dir / "host.json", "host.json")
    return HostOptions.from_json(apply_host_overrides(doc, environ))


def load_local_values(app_dir: Path) -> dict[str, str]:
    """`Values` of local.settings.json (empty when the file is absent, as with Core Tools)."""
    path = app_dir / "local.settings.json"
    if not path.exists():
        log.warning("local.settings.json not found in %s; using the environment only", app_dir)
        return {}
    doc = read_json(path, "local.settings.json")
    if doc.get("IsEncrypted"):
        raise ConfigError("local.settings.json is encrypted; decrypt it first (func settings decrypt)")
    values = doc.get("Values") or {}
    if not isinstance(values, dict):
        raise ConfigError("local.settings.json: Values must be an object")
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def apply_values(values: Mapping[str, str], environ: MutableMapping[str, str]) -> list[str]:
    """Copy Values into the environment; a variable already set wins (Core Tools does the same)."""
    skipped = []
    for key, value in values.items():
        if key in environ:
            skipped.append(key)
        else:
            environ[key] = value
    return skipped


def host_id(app_dir: Path, environ: Mapping[str, str]) -> str:
    """A stable host id: the override setting, else the app folder's name, cut to 32 valid chars."""
    raw = environ.get(HOST_ID_SETTING) or app_dir.resolve().name or "localhost"
    cleaned = re.sub(r"[^a-z0-9-]", "-", raw.lower())[:HOST_ID_MAX_CHARS].strip("-")
    return cleaned or "localhost"


def body_limit_bytes(environ: Mapping[str, str]) -> int:
    raw = environ.get(BODY_LIMIT_SETTING)
    if not raw:
        return DEFAULT_BODY_LIMIT_BYTES
    try:
        return int(raw)
    except ValueError as e:
        raise ConfigError(f"{BODY_LIMIT_SETTING}={raw!r} is not a number of bytes") from e


def process_environ() -> MutableMapping[str, str]:
    """The one place the host touches the process environment (the app reads its settings from it)."""
    return os.environ


LOOP_WARN_SETTING = "LOCAL_HOST_LOOP_WARN_MS"  # local host only: see looplag.py
DEFAULT_LOOP_WARN_MS = 100


def loop_warn_ms(environ: Mapping[str, str]) -> int:
    raw = environ.get(LOOP_WARN_SETTING, "").strip()
    if not raw:
        return DEFAULT_LOOP_WARN_MS
    try:
        value = int(raw)
    except ValueError as e:
        raise ConfigError(f"{LOOP_WARN_SETTING}={raw!r} is not a whole number of milliseconds") from e
    if value < 0:
        raise ConfigError(f"{LOOP_WARN_SETTING}={value} must be 0 (off) or more")
    return value
