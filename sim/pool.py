"""Seeds in parallel: `ordered(tasks, work, jobs)` runs `work(task)` in `jobs` forked worker processes and yields
each (task, result) in the order of `tasks`, whatever order they finished in, so a run prints what one process
would have printed. Tasks are drawn lazily, only when a worker is free: a caller may change what the rest of the
iterator yields from what it has been given so far (the mutant runner stops a row's seeds once one catches it),
and the work begun beyond what the caller takes is at most what the workers ran meanwhile. Stopping early (a break,
an error) terminates the workers. With one job everything runs in this process, as before.

A seed's run depends only on its seed (`sim.world.run`: a fresh world and event loop each time, the garbage
collector off during it, tasks kept and cancelled in the order they were made, never in a set's order, which follows
addresses: `tests/sim/test_alone.py`), and a forked worker inherits this process's hash seed (PYTHONHASHSEED) and
logging, so its schedule is this process's.
`work` and the tasks and results cross a pipe: module-level functions and small picklable values."""

from __future__ import annotations

import functools
import gc
import itertools
import multiprocessing
import queue
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Timed(Generic[R]):
    """A result and the CPU seconds its worker spent on it."""

    value: R
    cpu_s: float


def timed(work: Callable[[T], R], task: T) -> Timed[R]:
    """`work(task)` and its CPU seconds. What survives a collection before a seed is the process's (its modules,
    the SDKs' tables, what earlier seeds cached): frozen (`gc.freeze`), so the collection each run starts with
    (`sim.world.run`) looks only at what came since, a few thousand objects rather than about ninety thousand
    (some 40 ms a seed). Only what is still reachable is frozen; a run's garbage is collected before the next run
    as before, so a seed's schedule is what it was."""
    began = time.process_time()
    gc.collect()
    gc.freeze()
    value = work(task)
    return Timed(value, time.process_time() - began)


def ordered(tasks: Iterable[T], work: Callable[[T], R], jobs: int) -> Iterator[tuple[T, Timed[R]]]:
    """(task, its result with its CPU seconds), in task order, `work` run in `jobs` processes (1: this one)."""
    if jobs <= 1:
        try:
            for task in tasks:
                yield task, timed(work, task)
        finally:
            gc.unfreeze()  # this process goes on (a test, a hunt): what `timed` froze is collected as before
        return
    finished: queue.Queue[int] = queue.Queue()  # the numbers of the tasks that ended (their callbacks ran)
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        pending: deque[tuple[int, T, AsyncResult[Timed[R]]]] = deque()
        ended: set[int] = set()
        numbered = enumerate(tasks)
        while True:
            for number, task in itertools.islice(numbered, jobs - (len(pending) - len(ended))):
                signal = functools.partial(_signal, finished, number)
                pending.append((number, task, pool.apply_async(timed, (work, task), callback=signal,
                                                               error_callback=signal)))  # fmt: skip
            if not pending:
                return
            ended.add(finished.get())
            while pending and pending[0][0] in ended:
                number, task, result = pending.popleft()
                ended.discard(number)
                yield task, result.get()  # a worker's exception is raised here
    finally:
        pool.terminate()
        pool.join()


def _signal(finished: queue.Queue[int], number: int, _: object) -> None:
    finished.put(number)
