"""Call a user function as the host does: Executing/Executed lines, functionTimeout, sync on threads.

Async functions run on the host's event loop; sync functions on a thread pool. At functionTimeout the real
host restarts the language worker process, which ends every invocation in flight, not only the one that
timed out. Here the app runs in the host's own process, so the restart is played out as its effect: every
invocation in flight is ended (async ones cancelled; a sync one cannot be stopped, since Python cannot kill
a thread, so the host stops waiting for it), with the real host's log lines.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from emulators.functions.config import format_timespan
from emulators.functions.context import InvocationContext
from emulators.functions.indexing import FunctionSpec

log = logging.getLogger(__name__)

HOST_DIR = Path(__file__).resolve().parent
ASYNCIO_DIR = Path(asyncio.__file__).parent
CONCURRENT_DIR = Path(contextvars.__file__).parent / "concurrent" / "futures"


class FunctionTimeoutError(TimeoutError):
    """Raised (as an Outcome's error) when an invocation outlives functionTimeout."""


@dataclass(frozen=True)
class Outcome:
    invocation_id: str
    duration_ms: float
    value: Any = None
    error: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        return isinstance(self.error, FunctionTimeoutError)


class Invoker:
    """Runs invocations and keeps track of those in flight, so shutdown can wait for them."""

    def __init__(self, timeout_s: float | None, executor: ThreadPoolExecutor) -> None:
        self.timeout_s = timeout_s
        self._executor = executor
        self._in_flight: set[asyncio.Task[Outcome]] = set()
        self._ended_by_restart: set[asyncio.Task[Any]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def invoke(self, spec: FunctionSpec, trigger_value: Any, reason: str, invocation_id: str = "") -> Outcome:
        """Invoke and wait; the invocation itself is shielded so a cancelled caller cannot cut it short."""
        task = asyncio.ensure_future(self._invoke(spec, trigger_value, reason, invocation_id or str(uuid.uuid4())))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return await asyncio.shield(task)

    async def wait_idle(self, grace_s: float) -> int:
        """Wait up to `grace_s` for in-flight invocations (also ones that start meanwhile), then cancel the rest.

        Returns how many had to be cancelled.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        if self._in_flight:
            log.info("Waiting up to %.0f s for %d in-flight invocation(s)", grace_s, len(self._in_flight))
        while self._in_flight and (remaining := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._in_flight), timeout=remaining)
        pending = set(self._in_flight)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        return len(pending)

    async def _invoke(self, spec: FunctionSpec, trigger_value: Any, reason: str, invocation_id: str) -> Outcome:
        log.info("Executing '%s' (Reason='%s', Id=%s)", spec.full_name, reason, invocation_id)
        kwargs = self._arguments(spec, trigger_value, invocation_id)
        started = time.monotonic()
        value: Any = None
        error: BaseException | None = None
        try:
            value = await self._call(spec, kwargs, invocation_id)
        except asyncio.CancelledError:
            restarted = asyncio.current_task() in self._ended_by_restart
            why = "the worker was restarted after a function timeout" if restarted else "the host is shutting down"
            error = asyncio.CancelledError(why)
        except Exception as e:
            error = e
        outcome = Outcome(invocation_id, (time.monotonic() - started) * 1000, value, error)
        self._log_outcome(spec, outcome)
        return outcome

    def _arguments(self, spec: FunctionSpec, trigger_value: Any, invocation_id: str) -> dict[str, Any]:
        kwargs = {spec.trigger_parameter: trigger_value}
        if spec.wants_context:
            kwargs["context"] = InvocationContext(invocation_id, spec.name, spec.directory)
        return kwargs

    async def _call(self, spec: FunctionSpec, kwargs: Mapping[str, Any], invocation_id: str) -> Any:
        if spec.is_async:
            running: asyncio.Future[Any] = asyncio.ensure_future(spec.user_function(**kwargs))
        else:
            call = functools.partial(spec.user_function, **kwargs)
            loop = asyncio.get_running_loop()
            running = loop.run_in_executor(self._executor, contextvars.copy_context().run, call)
        try:
            return await asyncio.wait_for(running, self.timeout_s)
        except TimeoutError as e:
            if running.cancelled() or not running.done():
                self._restart_worker()
                raise self._timed_out(spec, invocation_id) from e
            raise

    def _restart_worker(self) -> None:
        """What the real host's worker restart does to the other invocations in flight: it ends them."""
        others = [t for t in self._in_flight if t is not asyncio.current_task()]
        log.error("A function timeout has occurred. Restarting the language worker: ending %d other "
                  "invocation(s) in flight.", len(others))  # fmt: skip
        for task in others:
            self._ended_by_restart.add(task)
            task.add_done_callback(self._ended_by_restart.discard)
            task.cancel()

    def _timed_out(self, spec: FunctionSpec, invocation_id: str) -> FunctionTimeoutError:
        limit = format_timespan(self.timeout_s or 0)
        log.error(
            "Timeout value of %s exceeded by function '%s' (Id: '%s'). Initiating cancellation.",
            limit,
            spec.full_name,
            invocation_id,
        )
        if not spec.is_async:
            log.warning(
                "'%s' is synchronous: its thread cannot be stopped and runs on, but the host no longer waits for it",
                spec.full_name,
            )
        return FunctionTimeoutError(f"Timeout value of {limit} was exceeded by function: {spec.full_name}")

    def _log_outcome(self, spec: FunctionSpec, outcome: Outcome) -> None:
        status = "Succeeded" if outcome.succeeded else "Failed"
        log.info(
            "Executed '%s' (%s, Id=%s, Duration=%dms)",
            spec.full_name,
            status,
            outcome.invocation_id,
            outcome.duration_ms,
        )
        error = outcome.error
        if error is not None and not outcome.timed_out and not isinstance(error, asyncio.CancelledError):
            log.error(
                "Exception while executing function: %s. %s: %s",
                spec.full_name,
                type(error).__name__,
                error,
                exc_info=(type(error), error, user_traceback(error.__traceback__)),
            )


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame outside the host and asyncio, so errors show the app's code."""
    while tb is not None and tb.tb_next is not None and _is_host_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _is_host_frame(filename: str) -> bool:
    path = Path(filename)
    return path.parent == HOST_DIR or path.parent == ASYNCIO_DIR or path.parent == CONCURRENT_DIR
