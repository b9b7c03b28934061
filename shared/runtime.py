"""The composition root: the process's settings (read once, at import of function_app) and its services, one
set per event loop, wired here and nowhere else.

Azure SDK aio clients belong to the loop that created them; the Functions worker runs every async
function on one loop, so in production there is exactly one `Services`. Tests and tools that run
several loops get one each.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import weakref
from collections.abc import Mapping
from pathlib import Path

from shared.bus.publisher import ServiceBusPublisher
from shared.core.settings import Settings
from shared.core.timeouts import check_drain_budget, function_timeout_s
from shared.handlers import load_handler
from shared.services import Services
from shared.store.fallback_state import BackoffStore
from shared.store.storage import Storage
from shared.telemetry import export
from shared.telemetry.metering import TransactionCounter
from shared.watch import lookout

log = logging.getLogger(__name__)

COUNTER = TransactionCounter()
HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"


_settings: Settings | None = None
_services: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Services] = weakref.WeakKeyDictionary()


def load_settings() -> Settings:
    """Build the settings from the environment once; a bad value raises SettingsError naming it."""
    global _settings
    if _settings is None:
        settings = Settings.from_env(os.environ)
        check_drain_budget(settings.drain_budget_s, configured_function_timeout_s(os.environ, HOST_JSON))
        load_handler(settings.handler)  # fail at start, not at the first chunk
        _settings = settings
    return _settings


def start_telemetry() -> str:
    """Configure where spans and metrics go, once per process, before the first invocation (function_app.py
    calls it at import, as the Azure Monitor distro asks; `services()` calls it for tools and tests)."""
    return export.configure(load_settings(), COUNTER)


def configured_function_timeout_s(environ: Mapping[str, str], host_json: Path) -> float | None:
    """The function timeout the host will apply: the app setting overriding host.json, else host.json's."""
    raw = environ.get("AzureFunctionsJobHost__functionTimeout")
    if raw is None:
        try:
            raw = json.loads(host_json.read_text()).get("functionTimeout")
        except (OSError, ValueError):
            return None
    return function_timeout_s(None if raw is None else str(raw))


def configure(settings: Settings) -> None:
    """Replace the settings (tests, tools); services built from the old ones are dropped."""
    global _settings
    _settings = settings
    _services.clear()


def services() -> Services:
    """The services of the running event loop, built on first use."""
    loop = asyncio.get_running_loop()
    found = _services.get(loop)
    if found is None:
        settings = load_settings()
        start_telemetry()
        tune_gc(settings.gc_gen0_threshold)
        storage = Storage(settings, COUNTER)
        found = Services(
            watch=lookout.arm,
            settings=settings,
            storage=storage,
            publisher=ServiceBusPublisher(settings),
            handler=load_handler(settings.handler),
            counter=COUNTER,
            backoff=BackoffStore(storage, settings),
        )
        _services[loop] = found
    return found


def tune_gc(gen0: int) -> None:
    """Collect the youngest generation after `gen0` new objects instead of Python's 700 (0: leave it).

    Profiling the drain: each message allocates about a thousand objects (its items), so at 700 the collector
    ran after every message and every hundredth run walked the whole heap (the SDKs, the worker): 0.3-0.5 ms
    of CPU per message, a fifth of the drain's. The process is this app's; the setting is process-wide."""
    if gen0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0, gen1, gen2)


async def close() -> None:
    """Close the running loop's services (tests and tools; the Functions worker never needs to)."""
    found = _services.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()
