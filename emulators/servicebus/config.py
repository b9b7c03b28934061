"""The official Service Bus emulator's `Config.json`, read into typed, validated queue properties.

Shape: `UserConfig → Namespaces[0] → Queues[] → {Name, Properties{...}}`, durations in ISO-8601
(`PT1M`, `P1DT2H`). Any bad value fails at start with a `ConfigError` that names the field by its path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulators.servicebus.errors import ConfigError
from emulators.servicebus.messages import (
    DEFAULT_DUPLICATE_WINDOW_MS,
    DEFAULT_LOCK_DURATION_MS,
    DEFAULT_MAX_DELIVERY_COUNT,
    QueueProperties,
)

# The stand-in accepts locks down to 1 s (real Service Bus: 5 s) so tests can exercise expiry quickly.
MIN_LOCK_DURATION_MS = 1_000
MAX_LOCK_DURATION_MS = 5 * 60_000
MIN_DUPLICATE_WINDOW_MS = 1_000
MAX_DUPLICATE_WINDOW_MS = 7 * 24 * 3600_000

_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)
_UNIT_MS = {"weeks": 604_800_000, "days": 86_400_000, "hours": 3_600_000, "minutes": 60_000, "seconds": 1_000}
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,259}$")

# Properties of the official format the stand-in reads; the others must keep their "off" value.
_SUPPORTED = {
    "MaxDeliveryCount",
    "LockDuration",
    "DefaultMessageTimeToLive",
    "DeadLetteringOnMessageExpiration",
    "RequiresDuplicateDetection",
    "DuplicateDetectionHistoryTimeWindow",
}
_OFF_VALUES: dict[str, object] = {"RequiresSession": False, "ForwardTo": "", "ForwardDeadLetteredMessagesTo": ""}


@dataclass(frozen=True)
class NamespaceConfig:
    name: str
    queues: Mapping[str, QueueProperties]
    locked_counts_as_active: bool | None = None  # stand-in extension `StandIn.LockedCountsAsActive`; None: unset


def parse_duration_ms(text: object, field: str) -> int:
    """ISO-8601 duration (`PT30S`, `P1DT1H`) to whole milliseconds; zero or malformed is an error."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or text in ("P", "PT") or str(text).endswith("T"):
        raise ConfigError(f"{field}: {text!r} is not an ISO-8601 duration such as 'PT1M' or 'P1DT2H'")
    total = sum(float(value) * _UNIT_MS[unit] for unit, value in match.groupdict().items() if value)
    if total <= 0:
        raise ConfigError(f"{field}: the duration must be longer than zero")
    return round(total)


def load_config(path: Path) -> NamespaceConfig:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
    return parse_config(document)


def parse_config(document: object) -> NamespaceConfig:
    root = _mapping(document, "(root)")
    user_config = _mapping(root.get("UserConfig"), "UserConfig")
    namespaces = _list(user_config.get("Namespaces"), "UserConfig.Namespaces")
    if len(namespaces) != 1:
        raise ConfigError(f"UserConfig.Namespaces: exactly one namespace is supported, found {len(namespaces)}")
    namespace = _parse_namespace(namespaces[0], "UserConfig.Namespaces[0]")
    return replace(namespace, locked_counts_as_active=_stand_in_options(root.get("StandIn")))


def _stand_in_options(raw: object) -> bool | None:
    """The stand-in's own section (the official emulator has none): `{"LockedCountsAsActive": true}`."""
    if raw is None:
        return None
    options = _mapping(raw, "StandIn")
    unknown = sorted(set(options) - {"LockedCountsAsActive"})
    if unknown:
        raise ConfigError(f"StandIn.{unknown[0]}: unknown option (known: LockedCountsAsActive)")
    if "LockedCountsAsActive" not in options:
        return None
    return _bool(options, "LockedCountsAsActive", "StandIn")


def _parse_namespace(raw: object, field: str) -> NamespaceConfig:
    namespace = _mapping(raw, field)
    name = namespace.get("Name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{field}.Name: a non-empty string is required")
    if namespace.get("Topics"):
        raise ConfigError(f"{field}.Topics: topics and subscriptions are not supported by the stand-in")
    queues: dict[str, QueueProperties] = {}
    for index, raw_queue in enumerate(_list(namespace.get("Queues", []), f"{field}.Queues")):
        queue_field = f"{field}.Queues[{index}]"
        queue_name, properties = _parse_queue(raw_queue, queue_field)
        if queue_name in queues:
            raise ConfigError(f"{queue_field}.Name: queue {queue_name!r} is defined twice")
        queues[queue_name] = properties
    return NamespaceConfig(name, queues)


def _parse_queue(raw: object, field: str) -> tuple[str, QueueProperties]:
    queue = _mapping(raw, field)
    name = queue.get("Name")
    if not isinstance(name, str) or not is_valid_queue_name(name):
        raise ConfigError(
            f"{field}.Name: {name!r} is not a valid queue name (letters, digits, '.', '-', '_', '/'; up to 260)"
        )
    return name, parse_queue_properties(_mapping(queue.get("Properties", {}), f"{field}.Properties"), field)


def is_valid_queue_name(name: str) -> bool:
    return bool(_QUEUE_NAME.match(name)) and not name.endswith("/")


def parse_queue_properties(properties: Mapping[str, Any], field: str) -> QueueProperties:
    _check_known_properties(properties, f"{field}.Properties")
    prefix = f"{field}.Properties"
    max_delivery = properties.get("MaxDeliveryCount", DEFAULT_MAX_DELIVERY_COUNT)
    if isinstance(max_delivery, bool) or not isinstance(max_delivery, int) or max_delivery < 1:
        raise ConfigError(f"{prefix}.MaxDeliveryCount: a whole number of at least 1 is required, got {max_delivery!r}")
    lock_ms = DEFAULT_LOCK_DURATION_MS
    if "LockDuration" in properties:
        lock_ms = parse_duration_ms(properties["LockDuration"], f"{prefix}.LockDuration")
    _check_range(lock_ms, MIN_LOCK_DURATION_MS, MAX_LOCK_DURATION_MS, f"{prefix}.LockDuration")
    ttl_ms = None
    if properties.get("DefaultMessageTimeToLive") is not None:
        ttl_ms = parse_duration_ms(properties["DefaultMessageTimeToLive"], f"{prefix}.DefaultMessageTimeToLive")
    window_ms = DEFAULT_DUPLICATE_WINDOW_MS
    if "DuplicateDetectionHistoryTimeWindow" in properties:
        window_ms = parse_duration_ms(
            properties["DuplicateDetectionHistoryTimeWindow"], f"{prefix}.DuplicateDetectionHistoryTimeWindow"
        )
    _check_range(
        window_ms, MIN_DUPLICATE_WINDOW_MS, MAX_DUPLICATE_WINDOW_MS, f"{prefix}.DuplicateDetectionHistoryTimeWindow"
    )
    return QueueProperties(
        max_delivery_count=max_delivery,
        lock_duration_ms=lock_ms,
        default_ttl_ms=ttl_ms,
        dead_letter_on_expiration=_bool(properties, "DeadLetteringOnMessageExpiration", prefix),
        requires_duplicate_detection=_bool(properties, "RequiresDuplicateDetection", prefix),
        duplicate_window_ms=window_ms,
    )


def _check_known_properties(properties: Mapping[str, Any], field: str) -> None:
    for key, value in properties.items():
        if key in _SUPPORTED:
            continue
        if key in _OFF_VALUES:
            if value not in (_OFF_VALUES[key], None):
                raise ConfigError(f"{field}.{key}: {value!r} is not supported by the stand-in")
            continue
        raise ConfigError(f"{field}.{key}: unknown property (supported: {', '.join(sorted(_SUPPORTED))})")


def _check_range(value_ms: int, low_ms: int, high_ms: int, field: str) -> None:
    if not low_ms <= value_ms <= high_ms:
        raise ConfigError(f"{field}: must be between {low_ms / 1000:g} s and {high_ms / 1000:g} s")


def _bool(properties: Mapping[str, Any], key: str, prefix: str) -> bool:
    value = properties.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}.{key}: true or false is required, got {value!r}")
    return value


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{field}: a JSON object is required")
    return value


def _list(value: object, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{field}: a JSON array is required")
    return value
