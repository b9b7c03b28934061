"""A sync handler's calls: each on a thread of its own, judged again as the call really starts.

A sync handler runs on a thread, off the event loop. On the loop's default executor (a few threads per CPU,
shared with everything else in the process) a chunk admitted to the handler could wait seconds for a thread,
and a chunk judged on the loop before that wait could start its call long after its batch was cancelled or
expired (issue 36 item 4: 5.4 s past the cancel's answer with a 3 s handler, minutes with a 60 s one). So each
call gets a thread as it is made (the drainer's places, CHUNK_CONCURRENCY and one per lane beyond, already
bound how many run at once), and the thread judges the chunk once more just before it calls the handler
(`ready`: a look, with no I/O, at what the process knows: its ended batches as last listed, and the chunk's
deadline by the clock). A call that is not ready is not made: its caller judges again on the loop (listing the
ended markers if they are stale) and calls again. A thread cannot be ended: its call keeps its place until it
returns, whatever becomes of the task that awaited it (`shared.engine.handler_calls`).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class NotReady:
    """What `call` answers when its thread found the call must not start (judge again)."""


NOT_READY = NotReady()


class ThreadPerCall(Executor):
    """Starts a thread for each call: a call never waits for a thread that another call holds."""

    def __init__(self, name: str) -> None:
        self._name = name

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # delivered to the awaiting task, as a pool's thread would
                future.set_exception(e)

        threading.Thread(target=run, name=self._name).start()
        return future


THREADS = ThreadPerCall("handler")


def start(fn: Callable[[], Any], ready: Callable[[], bool]) -> asyncio.Future[Any]:
    """`fn()` on a thread of its own if `ready()` holds as the thread begins it, as a future: its result (or its
    exception), else NOT_READY. The call runs in the caller's context (its span, its logging context). The future
    is the thread's: a task that awaits it through `asyncio.shield` can be cancelled and the future still says
    when the thread returns (`shared.engine.handler_calls`)."""
    context = contextvars.copy_context()

    def begin() -> Any:
        return context.run(fn) if ready() else NOT_READY

    return asyncio.get_running_loop().run_in_executor(THREADS, begin)
