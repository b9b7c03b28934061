"""The running host: HTTP listener, timer and Service Bus listeners, and a graceful stop."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

from emulators.functions.config import HostOptions
from emulators.functions.easyauth import EasyAuth
from emulators.functions.errors import ConfigError, HostError, IndexingError
from emulators.functions.hoststorage import HostStorage, blob_service
from emulators.functions.http import PARSE_LINE_BYTES, HttpFrontEnd, HttpRoute, http_routes
from emulators.functions.indexing import FunctionSpec, LoadFailure
from emulators.functions.invoke import Invoker
from emulators.functions.keys import Keys
from emulators.functions.looplag import watch_loop
from emulators.functions.server import HostRunner
from emulators.functions.servicebus import (
    SERVICE_BUS_TRIGGER,
    ServiceBusListener,
    ServiceBusTrigger,
    service_bus_trigger,
)
from emulators.functions.timers import TIMER_TRIGGER, TimerListener, TimerTrigger, timer_trigger

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
LISTENER_STOP_S = 10.0


@dataclass
class HostPlan:
    """The functions sorted by trigger, with the ones that failed to load."""

    http: list[HttpRoute] = field(default_factory=list)
    timers: list[TimerTrigger] = field(default_factory=list)
    service_bus: list[ServiceBusTrigger] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)


def plan_functions(
    functions: Sequence[FunctionSpec], failures: Sequence[LoadFailure], options: HostOptions, now: datetime
) -> HostPlan:
    plan = HostPlan(http=http_routes(functions), failures=list(failures))
    for spec in functions:
        try:
            if spec.trigger_type == TIMER_TRIGGER:
                plan.timers.append(timer_trigger(spec, now))
            elif spec.trigger_type == SERVICE_BUS_TRIGGER:
                plan.service_bus.append(service_bus_trigger(spec, options.service_bus))
        except (ConfigError, IndexingError) as e:
            plan.failures.append(LoadFailure(spec.name, str(e)))
    return plan


@dataclass
class Host:
    plan: HostPlan
    options: HostOptions
    settings: Mapping[str, str]
    host_id: str
    port: int
    body_limit_bytes: int
    grace_s: float
    keys: Keys | None = None
    loop_warn_ms: int = 0
    easy_auth: EasyAuth | None = None
    invoker: Invoker = field(init=False)
    _executor: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self._executor = ThreadPoolExecutor(thread_name_prefix="function")
        self.invoker = Invoker(self.options.function_timeout_s, self._executor)

    async def run(self, stopping: asyncio.Event, on_started: Callable[[], None] | None = None) -> None:
        """Serve until `stopping` is set, then stop listening and wait for in-flight work."""
        storage = await self._storage() if self.plan.timers else None
        try:
            runner = await self._start_http()
        except BaseException:
            if storage is not None:
                await storage.close()
            raise
        listeners = [asyncio.create_task(coro) for coro in self._listeners(storage, stopping)]
        if on_started is not None:
            on_started()
        log.info("Host started (host id %s); press Ctrl+C to shut down", self.host_id)
        try:
            await stopping.wait()
        finally:
            await self._shutdown(runner, listeners, storage)

    async def _start_http(self) -> web.AppRunner:
        front = HttpFrontEnd(
            self.plan.http, self.options.route_prefix, self.invoker, self.host_id, self.keys, self.easy_auth
        )
        # auto_decompress off: the real host hands the function the body as sent, Content-Encoding and all.
        runner = HostRunner(
            front.application(self.body_limit_bytes),
            access_log=None,
            shutdown_timeout=self.grace_s,
            auto_decompress=False,
            max_line_size=PARSE_LINE_BYTES,  # a longer request line is answered by the front end: a JSON 414
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, LOOPBACK, self.port).start()
        except OSError as e:
            await runner.cleanup()
            if e.errno == errno.EADDRINUSE:
                raise HostError(
                    f"Port {self.port} is unavailable. Close the process using that port, "
                    "or specify another port using --port."
                ) from e
            raise
        return runner

    async def _storage(self) -> HostStorage:
        storage = HostStorage(blob_service(self.settings))
        try:
            await storage.ensure_container()
        except Exception as e:
            await storage.close()
            raise HostError(f"AzureWebJobsStorage is not reachable (timers need it): {e}") from e
        return storage

    def _listeners(self, storage: HostStorage | None, stopping: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        coros = [self._guard("event loop watch", watch_loop(stopping, self.loop_warn_ms))]
        for timer in self.plan.timers:
            assert storage is not None
            listener = TimerListener(timer, storage, self.invoker, self.host_id, self.options.singleton)
            coros.append(self._guard(listener.name, listener.run(stopping)))
        for trigger in self.plan.service_bus:
            sb = ServiceBusListener(trigger, self.settings, self.options.service_bus, self.invoker)
            coros.append(self._guard(sb.name, sb.run(stopping)))
        return coros

    async def _guard(self, name: str, listener: Coroutine[Any, Any, None]) -> None:
        """A listener that dies is logged with its traceback; the rest of the host keeps running."""
        try:
            await listener
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("The listener for '%s' stopped with an error", name)

    async def _shutdown(
        self, runner: web.AppRunner, listeners: Sequence[asyncio.Task[None]], storage: HostStorage | None
    ) -> None:
        log.info("Stopping the host: no new invocations; waiting up to %.0f s for in-flight work", self.grace_s)
        http_stopped = asyncio.create_task(runner.cleanup())  # stops listening, then waits for open requests
        cancelled = await self.invoker.wait_idle(self.grace_s)
        if cancelled:
            log.warning("%d invocation(s) were cancelled at the end of the grace period", cancelled)
        if listeners:
            # Listeners now settle what finished and close their clients.
            _, pending = await asyncio.wait(listeners, timeout=LISTENER_STOP_S)
            for task in pending:
                task.cancel()
        await http_stopped
        if storage is not None:
            await storage.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("Host stopped")
