"""The handler limit's one stated exception (`sim.lapses`, docs/settings.md `HANDLER_MAX_IN_FLIGHT`), kept narrow:
only a sync call still running whose session's lease lapsed at storage after a renewal storage did not answer,
while that session's function runs. The records are fed as the storage stand-in, the app's warning and the host
feed them in a run (replay seed 783 met the case; 658 and 627 must not be excused)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from sim.clock import EPOCH_S
from sim.doors.replay_rings import partition_for
from sim.host import INSTANCE, Call
from sim.lapses import LEASES_LOGGER, Lapses

BATCH = "1f21658fc72545e78f8eac1e0128f760"
LEASE_S = 15.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now


def _world() -> Any:
    settings = SimpleNamespace(partition_queues=lambda: ["work-0", "work-1"])
    return SimpleNamespace(loop=_Clock(), calls=[], settings=settings)


def _setup(kind: str = "sync") -> tuple[Any, Lapses, str]:
    """i1 holds its partition's slot 0 from 24 s, renews once at 29 s, starts a call at 25 s."""
    world = _world()
    lapses = Lapses(world)
    world.lapses = lapses
    blob = f"leases/{partition_for(world, BATCH, 5)}/0"
    world.loop.now = 24.0
    lapses.on_lease("i1", ("acquire", blob, "lease-a", EPOCH_S + 24.0 + LEASE_S))
    world.calls.append(Call("i1", BATCH, 5, 1, kind, 25.0, 25.0))
    world.loop.now = 29.0
    lapses.on_lease("i1", ("renew", blob, "lease-a", EPOCH_S + 29.0 + LEASE_S))
    return world, lapses, blob


def _renewal_failed(world: Any, lapses: Lapses, blob: str, at: float) -> None:
    """The app's warning, logged in i1's context as `DrainLease._renew_forever` does."""
    world.loop.now = at
    queue, slot = blob.split("/")[1], int(blob.split("/")[2])
    token = INSTANCE.set(SimpleNamespace(name="i1"))  # type: ignore[arg-type]
    try:
        with lapses.watched():
            logging.getLogger(LEASES_LOGGER).warning(
                "drain lease %s/%d not renewed, trying again: %s", queue, slot, "timed out"
            )
    finally:
        INSTANCE.reset(token)


def test_a_sync_call_past_its_lease_lapsed_in_an_outage_is_left_out_while_its_function_runs() -> None:
    world, lapses, blob = _setup()
    _renewal_failed(world, lapses, blob, 34.0)
    world.loop.now = 43.0  # 29 + 15 = 44: not lapsed yet
    assert lapses.outliving() == 0
    world.loop.now = 50.0
    assert lapses.outliving() == 1
    lapses.on_session("i2", blob.split("/")[1], 0, 2.0)  # another instance's function: not this call's
    lapses.on_session("i1", blob.split("/")[1], 0, 0.1)  # one of i1's own, begun after the call (lease taken)
    assert lapses.outliving() == 1


@pytest.mark.parametrize("case", ["async", "no failed renewal", "released in time", "function returned"])
def test_nothing_else_is_left_out(case: str) -> None:
    world, lapses, blob = _setup("async" if case == "async" else "sync")
    if case != "no failed renewal":  # else: renewed too rarely, storage up (`lease-renewed-once-per-period`)
        _renewal_failed(world, lapses, blob, 34.0)
    if case == "released in time":
        world.loop.now = 40.0
        lapses.on_lease("i1", ("release", blob, "lease-a", None))
    world.loop.now = 50.0
    if case == "function returned":  # the session ended with its thread running (replay seed 658)
        lapses.on_session("i1", blob.split("/")[1], 0, 50.0 - 24.0)
    assert lapses.outliving() == 0


def test_a_lapse_counts_once_it_happened_whether_storage_renews_it_late_or_another_takes_it() -> None:
    world, lapses, blob = _setup()
    _renewal_failed(world, lapses, blob, 34.0)
    world.loop.now = 46.0  # storage back: the renewal is served after the period ran out (44 s)
    lapses.on_lease("i1", ("renew", blob, "lease-a", EPOCH_S + 46.0 + LEASE_S))
    assert lapses.outliving() == 1
    world, lapses, blob = _setup()
    _renewal_failed(world, lapses, blob, 34.0)
    world.loop.now = 47.0  # the next holder
    lapses.on_lease("i0", ("acquire", blob, "lease-b", EPOCH_S + 47.0 + LEASE_S))
    assert lapses.outliving() == 1
