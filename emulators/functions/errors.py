"""The local host's error tree."""

from __future__ import annotations


class HostError(Exception):
    """Raised when the host cannot start; the message is what the user needs to fix it."""


class ConfigError(HostError):
    """Raised when host.json, local.settings.json or an app setting is missing or malformed."""


class IndexingError(HostError):
    """Raised when function_app.py cannot be imported or declares no usable FunctionApp."""


class ScheduleError(ConfigError):
    """Raised when a timer schedule is not a valid 6-field NCRONTAB expression."""


class RouteError(ConfigError):
    """Raised when an HTTP route template cannot be compiled."""
