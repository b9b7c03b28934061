"""Console output close to `func start`: timestamped host lines and the function listing at start."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from emulators.functions.http import HttpRoute, route_url
from emulators.functions.indexing import LoadFailure
from emulators.functions.servicebus import ServiceBusTrigger
from emulators.functions.timers import TimerTrigger


class HostFormatter(logging.Formatter):
    """`[2024-05-01T10:00:00.123Z] message`, as Core Tools prints host and function logs."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # isoformat rather than strftime: it imports nothing, so it still works while Python shuts down.
        moment = datetime.fromtimestamp(record.created, UTC).replace(tzinfo=None)
        return moment.isoformat(timespec="milliseconds") + "Z"

    def format(self, record: logging.LogRecord) -> str:
        return f"[{self.formatTime(record)}] {super().format(record)}"


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(HostFormatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("azure", "uamqp", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def function_listing(
    base_url: str,
    route_prefix: str,
    http: Sequence[HttpRoute],
    timers: Sequence[TimerTrigger],
    service_bus: Sequence[ServiceBusTrigger],
    failures: Sequence[LoadFailure],
) -> str:
    lines = ["", "Functions:", ""]
    entries: list[tuple[str, str]] = []
    for route in http:
        methods = ",".join(route.methods) if route.methods else "GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS"
        entries.append((route.spec.name, f"[{methods}] {route_url(base_url, route_prefix, route.template)}"))
    for timer in timers:
        entries.append((timer.spec.name, f"timerTrigger ({timer.schedule.expression})"))
    for trigger in service_bus:
        entries.append((trigger.spec.name, f"serviceBusTrigger ({trigger.entity} via {trigger.connection})"))
    for name, detail in sorted(entries):
        lines += [f"        {name}: {detail}", ""]
    for failure in failures:
        lines += [f"        {failure.name}: The function is in error: {failure.reason}", ""]
    return "\n".join(lines)
