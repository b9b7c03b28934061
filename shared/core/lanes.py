"""Lanes: the storage queues one partition's chunks wait in, by tenant and priority, and the order a drainer
takes them in (pure; `shared.engine.lane_queues` does the I/O).

A partition `p` (a work queue of `Settings.partition_queues`) has the shared tenant's normal lane, `p` itself,
and a lane per (tenant, priority) that has ever been submitted to: `p-t-<tenant>` (normal) and `p-h-<tenant>`
(high; the shared tenant's is `p-h-default`). One drainer serves all of a partition's lanes: one lease, one
set of trigger events, one fallback look. It takes a page (up to 32 messages) at a time from the lane whose
turn it is: high lanes before normal ones, but never more than `HIGH_BURST` high pages in a row while a normal
lane has work (so a normal lane waits at most that many pages); lanes of one priority in turn (round robin by
page), so a tenant with ten items never waits behind another's million.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_TENANT = "default"
TENANT = re.compile(r"^[a-z0-9]{1,24}$")
TENANT_MAX = 24
LANE_SUFFIX_MAX = len("-h-") + TENANT_MAX  # the longest a lane's name adds to its partition's
HIGH_BURST = 4  # high pages in a row at most while a normal lane waits: normal lanes get >= 1 page in 5
EMPTY_RECHECK_S = 5.0  # a lane that came back empty is looked at again this often while the drain goes on


class Priority:
    NORMAL = "normal"
    HIGH = "high"
    ALL = (NORMAL, HIGH)


@dataclass(frozen=True)
class Lane:
    partition: str
    tenant: str = DEFAULT_TENANT
    priority: str = Priority.NORMAL

    @property
    def high(self) -> bool:
        return self.priority == Priority.HIGH

    @property
    def name(self) -> str:
        if self.high:
            return f"{self.partition}-h-{self.tenant}"
        if self.tenant == DEFAULT_TENANT:
            return self.partition
        return f"{self.partition}-t-{self.tenant}"


def parse(partition: str, name: str) -> Lane | None:
    """The lane a queue name is, if it is one of `partition`'s (its poison queue and other partitions' queues
    that share the prefix are not)."""
    if name == partition:
        return Lane(partition)
    if not name.startswith(partition + "-"):
        return None
    kind, sep, tenant = name[len(partition) + 1 :].partition("-")
    if not sep or not TENANT.fullmatch(tenant):
        return None
    if kind == "h":
        return Lane(partition, tenant, Priority.HIGH)
    if kind == "t" and tenant != DEFAULT_TENANT:
        return Lane(partition, tenant)
    return None


def checked_tenant(raw: str | None) -> str:
    """A submit's tenant: absent means the shared one. The error names the rule (the API turns it into a 400)."""
    if raw is None:
        return DEFAULT_TENANT
    if not TENANT.fullmatch(raw):
        raise ValueError(f"tenant must be 1-{TENANT_MAX} lowercase letters or digits (it names a storage queue)")
    return raw


def checked_priority(raw: str | None) -> str:
    if raw is None:
        return Priority.NORMAL
    if raw not in Priority.ALL:
        raise ValueError('priority must be "normal" or "high"')
    return raw


@dataclass
class LaneState:
    lane: Lane
    stamp: str | None = None  # the last submit's mark on the queue (its metadata), as last listed
    due_at: float = 0.0  # monotonic: when to receive from it next (0: now; inf: only when told it has work)


@dataclass
class LaneOrder:
    """Which lane a receiver takes its next page from. Not thread-safe; one event loop."""

    high_burst: int = HIGH_BURST
    recheck_s: float = EMPTY_RECHECK_S
    lanes: dict[str, LaneState] = field(default_factory=dict)
    _last: dict[str, str] = field(default_factory=dict)  # per priority: the lane that had the last turn
    _high_run: int = 0

    def listed(self, found: dict[str, tuple[Lane, str | None]], now: float, *, mid_drain: bool = False) -> list[str]:
        """The lanes a listing found (name: (lane, stamp)): new ones, and known ones whose stamp moved (a submit
        since), are due now. Answers the names that became due. `mid_drain`: a new lane without a mark yet is
        a submit still storing (its chunks would only be put back until it commits): due once marked, or after
        `recheck_s`."""
        woken = []
        for name, (lane, stamp) in found.items():
            state = self.lanes.get(name)
            if state is None:
                waits = mid_drain and stamp is None and name != lane.partition
                self.lanes[name] = LaneState(lane, stamp, now + self.recheck_s if waits else 0.0)
                if not waits:
                    woken.append(name)
            elif stamp != state.stamp:  # a submit since the last listing, whether or not the lane was due
                state.stamp = stamp
                state.due_at = 0.0
                woken.append(name)
        return woken

    def add(self, lane: Lane) -> None:
        self.lanes.setdefault(lane.name, LaneState(lane))

    def wake_all(self) -> None:
        """A session starts: every lane is looked at."""
        for state in self.lanes.values():
            state.due_at = 0.0

    def _due(self, priority: str, now: float) -> list[str]:
        return sorted(n for n, s in self.lanes.items() if s.lane.priority == priority and s.due_at <= now)

    def next(self, now: float) -> str | None:
        """The lane for the next page, or None when none is due."""
        high, normal = self._due(Priority.HIGH, now), self._due(Priority.NORMAL, now)
        if high and not (normal and self._high_run >= self.high_burst):
            self._high_run += 1
            return self._take(Priority.HIGH, high)
        if normal:
            self._high_run = 0
            return self._take(Priority.NORMAL, normal)
        return None

    def _take(self, priority: str, due: list[str]) -> str:
        """Round robin by name: the first due lane after the one that had the last turn."""
        last = self._last.get(priority)
        chosen = next((n for n in due if last is None or n > last), due[0])
        self._last[priority] = chosen
        return chosen

    def emptied(self, name: str, now: float) -> None:
        """A page came back empty: not due again until a submit marks it, or `recheck_s` has passed."""
        state = self.lanes.get(name)
        if state is not None:
            state.due_at = now + self.recheck_s


def mark_text(epoch_ms: int, nonce: str, committed: tuple[str, str] | None = None) -> str:
    """A lane's mark: when (for a submit's, the batch's acceptance) and by which writer, and the batch and attempt
    a submit committed (queue metadata: ASCII)."""
    stamp = f"{epoch_ms}-{nonce}"
    return stamp if committed is None else f"{stamp}-{committed[0]}-{committed[1]}"


def committed_in(mark: str | None) -> tuple[str, str, int] | None:
    """The (batch id, attempt, accepted epoch ms) a mark says was committed, or None for a mark that says none
    (or is not ours)."""
    parts = (mark or "").split("-")
    if len(parts) != 4 or not parts[0].isascii() or not parts[0].isdigit():
        return None
    if not all(p.isascii() and p.isalnum() for p in parts[2:]):
        return None
    return parts[2], parts[3], int(parts[0])
