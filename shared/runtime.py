"""The process's settings (read once, at import of function_app) and its services, one set per event loop.

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
from dataclasses import dataclass, field
from pathlib import Path

from shared import telemetry
from shared.deferrals import DeferredTriggers
from shared.fallback_state import BackoffStore
from shared.handlers import ChunkHandler, load_handler
from shared.metering import TransactionCounter
from shared.publisher import Publisher, ServiceBusPublisher
from shared.settings import Settings, check_drain_budget, function_timeout_s
from shared.storage import Storage
from shared.verdicts import CommittedAttempts

log = logging.getLogger(__name__)

COUNTER = TransactionCounter()
HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"


@dataclass
class Services:
    settings: Settings
    storage: Storage
    publisher: Publisher
    handler: ChunkHandler
    counter: TransactionCounter
    backoff: BackoffStore
    # (queue, slot) pairs this process is draining right now: a duplicate trigger costs no transaction.
    draining: set[tuple[str, int]] = field(default_factory=set)
    # batch id -> committed attempt, for batches whose manifest was read as accepted; bounded in size and age.
    committed: CommittedAttempts = field(default_factory=CommittedAttempts)
    # trigger events a submit could not publish, tried again from this process
    deferred: DeferredTriggers = field(init=False)
    # large submits being decoded and stored now (MAX_LARGE_SUBMITS)
    large_submits: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.deferred = DeferredTriggers(lambda: self.publisher, self.arm_looks)
        self.large_submits = asyncio.Semaphore(self.settings.max_large_submits)

    async def arm_looks(self, queue: str) -> bool:
        from shared import lookout  # it serves these services

        return await lookout.arm(self, queue)

    async def close(self) -> None:
        await self.deferred.close()
        await self.publisher.close()
        await self.storage.close()


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
    return telemetry.configure(load_settings(), COUNTER)


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
