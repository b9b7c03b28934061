"""The clocks and the randomness the app reads, made virtual and seeded while a simulation runs.

`patched(world)` swaps, for the length of one run: `time.time` and `time.monotonic` (and every default
argument in `shared` that bound them at import, such as a drainer's `clock=time.monotonic`), the `datetime`
the app's modules use (`datetime.now`), `uuid.uuid4` (seeded), `uuid.uuid1` (numbered), the `random` module's
functions and `random.Random()` without a seed. Outside a simulated loop each patched clock answers as the real one
does.

Each simulated instance runs its tasks in a context naming it (`INSTANCE`), so its wall clock is the world's
plus its skew: instances' clocks disagree as real hosts' do. Storage and Service Bus keep the world's time.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import random
import sys
import time
import uuid
from asyncio import _get_running_loop as _running_loop
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone, tzinfo
from typing import Any

from sim.loop import SimLoop

EPOCH_S = 1_900_000_000.0  # the virtual wall clock at the loop's time 0 (a date in 2030)
SKEW_S: contextvars.ContextVar[float] = contextvars.ContextVar("sim_skew_s", default=0.0)

_real_time = time.time
_real_monotonic = time.monotonic
_real_uuid4 = uuid.uuid4
_RealRandom = random.Random


def _sim_loop() -> SimLoop | None:
    loop = _running_loop()
    return loop if isinstance(loop, SimLoop) else None


def sim_time() -> float:
    loop = _sim_loop()
    return _real_time() if loop is None else EPOCH_S + loop.time() + SKEW_S.get()


def sim_time_ns() -> int:
    return int(sim_time() * 1_000_000_000)


def sim_monotonic() -> float:
    loop = _sim_loop()
    return _real_monotonic() if loop is None else loop.time() + SKEW_S.get()


def world_time(loop: SimLoop) -> float:
    """The world's wall clock (storage's, Service Bus's): no instance's skew."""
    return EPOCH_S + loop.time()


class SimDateTime(datetime):
    """`datetime` whose `now()` and `utcnow()` read the simulated wall clock."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> SimDateTime:
        return cls.fromtimestamp(sim_time(), tz)

    @classmethod
    def utcnow(cls) -> SimDateTime:
        return cls.fromtimestamp(sim_time(), timezone.utc).replace(tzinfo=None)


def _app_modules() -> list[Any]:
    return [
        m for name, m in list(sys.modules.items()) if m is not None and (name == "shared" or name.startswith("shared."))
    ]


def _rebind_defaults(old: Any, new: Any) -> list[tuple[Any, str, Any]]:
    """Replace default arguments in the app's functions that are `old` by `new`; returns how to undo it."""
    undo: list[tuple[Any, str, Any]] = []
    seen: set[int] = set()

    def visit(fn: Any) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        if fn.__defaults__ and any(d is old for d in fn.__defaults__):
            undo.append((fn, "__defaults__", fn.__defaults__))
            fn.__defaults__ = tuple(new if d is old else d for d in fn.__defaults__)
        if fn.__kwdefaults__ and any(d is old for d in fn.__kwdefaults__.values()):
            undo.append((fn, "__kwdefaults__", dict(fn.__kwdefaults__)))
            fn.__kwdefaults__ = {k: new if d is old else d for k, d in fn.__kwdefaults__.items()}

    for module in _app_modules():
        for value in list(vars(module).values()):
            if inspect.isfunction(value):
                visit(value)
            elif inspect.isclass(value) and value.__module__ == module.__name__:
                for member in vars(value).values():
                    target = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                    if inspect.isfunction(target):
                        visit(target)
    return undo


@contextmanager
def patched(rng: random.Random) -> Iterator[None]:
    """Virtual clocks and seeded randomness for one run (see the module docstring)."""
    undo: list[tuple[Any, str, Any]] = []

    def setattr_undoably(target: Any, name: str, value: Any) -> None:
        undo.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def seeded_random(x: Any = None) -> random.Random:
        return _RealRandom(rng.getrandbits(64) if x is None else x)

    state = random.getstate()
    random.seed(rng.getrandbits(64))
    try:
        setattr_undoably(time, "time", sim_time)
        setattr_undoably(time, "monotonic", sim_monotonic)
        setattr_undoably(time, "time_ns", sim_time_ns)  # a replay's claim stamp, a parked chunk's (epoch ms)
        setattr_undoably(uuid, "uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4))
        # The SDKs' client request ids (`x-ms-client-request-id`, which no one here reads): numbered, not read
        # from the machine's clock and node (about 20 us of CPU each, a few percent of a run), and drawn from no rng.
        numbered = itertools.count(1)
        setattr_undoably(uuid, "uuid1", lambda node=None, clock_seq=None: uuid.UUID(int=next(numbered), version=1))
        setattr_undoably(random, "Random", seeded_random)
        undo.extend(_rebind_defaults(_real_monotonic, sim_monotonic))
        undo.extend(_rebind_defaults(_real_time, sim_time))
        for module in _app_modules():
            if getattr(module, "datetime", None) is datetime:
                setattr_undoably(module, "datetime", SimDateTime)
        yield
    finally:
        for target, name, value in reversed(undo):
            setattr(target, name, value)
        random.setstate(state)
