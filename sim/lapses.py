"""The drain leases as storage kept them, for the one exception docs/settings.md states to HANDLER_MAX_IN_FLIGHT:
a sync handler's call running while storage is down long enough for its session's lease to lapse can overlap the
next holder's calls until it returns or `functionTimeout` ends the process (a thread cannot be ended; the
session's guard ends only its async calls, `Drainer._before_lapse`).

`outliving()` counts the handler calls in flight that this exception covers, which `sim.sessions` leaves out of
the limit: a sync call, still running, whose session's lease lapsed at storage after the call began (its period
ran out with neither a renewal nor a release served) once a renewal had failed (the app's warning
"drain lease ... not renewed": storage down), while that session's function still runs. A lease that lapses
with no failed renewal (a drainer renewing too rarely), a lease released in time, an async call, and a call whose
session has returned are never excused. The call's session is known by its instance and its chunk's partition:
any of that instance's leases on that partition's slots, held when the call began."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from shared.core import layout
from sim.clock import EPOCH_S
from sim.doors.replay_rings import partition_for
from sim.heard import heard
from sim.host import INSTANCE

World = Any  # `sim.world.World`

LEASES_LOGGER = "shared.store.leases"
NOT_RENEWED = "not renewed"  # in the warning `DrainLease._renew_forever` logs when storage did not answer


@dataclass
class Tenure:
    """One lease on a drain lease blob, as storage served it (virtual s)."""

    instance: str | None
    blob: str
    acquired_s: float
    expires_s: float
    released_s: float | None = None
    lapsed_s: list[float] = field(default_factory=list)  # each moment its period ran out unrenewed

    def lapses(self, now: float) -> list[float]:
        if self.released_s is None and self.expires_s <= now:
            return [*self.lapsed_s, self.expires_s]
        return self.lapsed_s


class Lapses:
    """The world's records of drain leases (`on_lease`, from the storage server), of renewals storage did not
    answer (`watched`) and of drain functions that returned (`on_session`)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.tenures: dict[str, Tenure] = {}  # lease id -> its tenure
        self.not_renewed: list[tuple[str, str, float]] = []  # (instance, blob, when) of a failed renewal
        self.returned: list[tuple[str, str, float, float]] = []  # (instance, lease blob, began, ended)

    def on_lease(self, instance: str | None, detail: tuple[str, str, str, float | None]) -> None:
        """A lease action storage served: (action, blob, lease id, its expiry in epoch s or None)."""
        action, blob, lease_id, expires = detail
        now = self.world.loop.time()
        if action not in ("acquire", "renew", "release") or (expires is None and action != "release"):
            return
        tenure = self.tenures.get(lease_id)
        if tenure is not None and now >= tenure.expires_s and tenure.released_s is None:
            tenure.lapsed_s.append(tenure.expires_s)
        if action == "release":
            if tenure is not None:
                tenure.released_s = now
        elif tenure is None:
            self.tenures[lease_id] = Tenure(instance, blob, now, float(expires or 0) - EPOCH_S)
        else:
            tenure.expires_s = float(expires or 0) - EPOCH_S

    def on_session(self, instance: str, queue: str, slot: int, took_s: float) -> None:
        now = self.world.loop.time()
        self.returned.append((instance, layout.lease_blob(queue, slot), now - took_s, now))

    def outliving(self) -> int:
        """The handler calls in flight that the lease exception covers (see the module docstring)."""
        world = self.world
        now = world.loop.time()
        return sum(1 for c in world.calls if c.kind == "sync" and c.ended_s is None and self._outlived(c, now))

    def _outlived(self, call: Any, now: float) -> bool:
        prefix = layout.lease_prefix(partition_for(self.world, call.batch_id, call.chunk))
        for tenure in self.tenures.values():
            if tenure.instance != call.instance or not tenure.blob.startswith(prefix):
                continue
            if tenure.acquired_s > call.started_s or (tenure.released_s or now) < call.started_s:
                continue
            if any(
                i == call.instance and b == tenure.blob and began <= call.started_s <= ended
                for i, b, began, ended in self.returned
            ):
                continue  # its function returned: nothing ends the thread any more (not the stated exception)
            for lapsed in tenure.lapses(now):
                failed = any(
                    i == call.instance and b == tenure.blob and tenure.acquired_s <= t <= lapsed
                    for i, b, t in self.not_renewed
                )
                if failed and call.started_s <= lapsed <= now:
                    return True
        return False

    @contextmanager
    def watched(self) -> Iterator[None]:
        """For one run: the renewals storage did not answer, as the app warns of them."""
        with heard(LEASES_LOGGER, logging.WARNING, _NotRenewed(self)):
            yield


class _NotRenewed(logging.Handler):
    def __init__(self, lapses: Lapses) -> None:
        super().__init__(logging.WARNING)
        self.lapses = lapses

    def emit(self, record: logging.LogRecord) -> None:
        instance = INSTANCE.get()
        if NOT_RENEWED not in str(record.msg) or instance is None or not isinstance(record.args, tuple):
            return
        blob = layout.lease_blob(str(record.args[0]), int(str(record.args[1])))
        self.lapses.not_renewed.append((instance.name, blob, self.lapses.world.loop.time()))
