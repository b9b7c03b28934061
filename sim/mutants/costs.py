"""Defects that cost storage transactions, caught by the transaction bounds
(`sim.checks.final.transactions_bounded`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.core.lanes import LaneOrder
from shared.engine import lane_queues, lane_watch
from sim.mutants.base import Mutant, scoped, swap


@contextmanager
def _quiet_record_ignored() -> Iterator[None]:
    """Item 1 (engine side): a session receives from every lane it knows, idle ones included, and peeks each at
    its end (the quiet record read, never trusted)."""
    start = LaneOrder.start
    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(LaneOrder, "start", lambda self, quiet: start(self, {})))
        stack.enter_context(scoped(LaneOrder, "maybe_holding", lambda self, quiet: sorted(self.lanes)))
        yield


@contextmanager
def _look_records_nothing() -> Iterator[None]:
    """A look reads the lanes not recorded quiet and records none it finds empty: lanes a drainer's best-effort
    write left out are read again at every look, idle (`make bench-tenants`: 1,005 of 2,000 lanes each tick)."""
    depths = lane_queues.depths

    async def forgetful(*args: Any, **kwargs: Any) -> Any:
        return await depths(*args, **{**kwargs, "record": False})

    yield from swap(lane_queues, "depths", forgetful)


@contextmanager
def _lanes_listed_every_poll() -> Iterator[None]:
    """A drainer lists its lanes every LANE_POLL_S (50 ms) while it drains, not once per LANE_POLL_MESSAGES
    messages (at most one listing per 1,000 items at the default chunk size)."""
    yield from swap(lane_watch, "LANE_POLL_MESSAGES", 0)


IDLE = "storage transactions an hour while idle"
SLOW_SEEDS = 30  # an `idle` seed runs hours of virtual time


MUTANTS = [
    Mutant("quiet-record-ignored", "01136fe (issue 26 item 1)", "a session receives from and peeks every lane, "
           "idle ones too", _quiet_record_ignored, family="idle", expect=IDLE, seeds=SLOW_SEEDS,
           invariant="storage transactions an hour while idle within the README's budget (`sim.checks.promises`)",
           why="an idle lane costs a session a GetMessages and a peek, but an idle stretch holds no session (the "
               "look chain ends with the last message; only the timer ticks), so the idle-cost promise cannot see "
               "it, and the `volume` family has one lane. Plan: a session cost bound per lane in a many-tenant wave"),
    Mutant("look-records-nothing", "this stop (issue 26 item 1, found by make bench-tenants)", "a look records "
           "no lane it reads empty in the quiet record", _look_records_nothing, family="idle", expect=IDLE,
           seeds=SLOW_SEEDS,
           invariant="storage transactions an hour while idle within the README's budget (`sim.checks.promises`)"),
    Mutant("lanes-listed-every-poll", "none (made here)", "lanes listed every 50 ms while a drain goes on, not "
           "once per 4 messages", _lanes_listed_every_poll, family="volume", expect="transactions per 1,000",
           seeds=20,
           invariant='at most 100 storage transactions a run and 30 per 1,000 items (`volume`)'),
]  # fmt: skip
