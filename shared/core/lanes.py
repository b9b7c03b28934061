"""Lanes: the storage queues one partition's chunks wait in, by tenant and priority, and the order a drainer
takes them in (pure; `shared.engine.lane_queues` does the I/O).

A partition `p` (a work queue of `Settings.partition_queues`) has the shared tenant's normal lane, `p` itself,
and a lane per (tenant, priority) that has ever been submitted to: `p-t-<tenant>` (normal) and `p-h-<tenant>`
(high; the shared tenant's is `p-h-default`). A tenant id is 1-128 of `A-Z a-z 0-9 . _ : -` (a UUID, a name
with hyphens); one of 1-24 lowercase letters and digits names its lanes as it is, any other by a hash of it
(`p-tx-<23 hex>`, `p-hx-<23 hex>`), and the lane's mark keeps the id itself (`shared.engine.lane_queues`).
One drainer serves all of a partition's lanes: one lease, one
set of trigger events, one fallback look. It takes a page (up to 32 messages) at a time from the lane whose
turn it is: high lanes before normal ones, but never more than `HIGH_BURST` high pages in a row while a normal
lane has work (so a normal lane waits at most that many pages); lanes of one priority in turn (round robin by
page), so a tenant with ten items never waits behind another's million.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

DEFAULT_TENANT = "default"
TENANT = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # what a submit may name
TENANT_MAX = 128
PLAIN = re.compile(r"^[a-z0-9]{1,24}$")  # a tenant id a queue name can carry as it is
HASHED = re.compile(r"^[0-9a-f]{23}$")  # 92 bits of SHA-256: no two tenants of a partition share one
HASHED_PREFIX = "#"  # a Lane's tenant when only its queue name is known (no id has this character)
LANE_SUFFIX_MAX = len("-hx-") + 23  # the longest a lane's name adds to its partition's (as `-h-` + 24)
HIGH_BURST = 4  # high pages in a row at most while a normal lane waits: normal lanes get >= 1 page in 5
STORING = "s"  # the last part of a mark a submit writes before it stores
EMPTY_RECHECK_S = 5.0  # a lane that gave work this session is looked at again this often while the drain goes on


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
        if self.tenant == DEFAULT_TENANT and not self.high:
            return self.partition
        suffix = queue_suffix(self.tenant)
        kind = "h" if self.high else "t"
        if suffix.startswith(HASHED_PREFIX):
            return f"{self.partition}-{kind}x-{suffix[1:]}"
        return f"{self.partition}-{kind}-{suffix}"


def queue_suffix(tenant: str) -> str:
    """How a tenant's lanes are named: the id itself when a queue name can carry it, else `#` and a hash of it."""
    if PLAIN.fullmatch(tenant) or (tenant.startswith(HASHED_PREFIX) and HASHED.fullmatch(tenant[1:])):
        return tenant
    return HASHED_PREFIX + hashlib.sha256(tenant.encode("ascii")).hexdigest()[:23]


def parse(partition: str, name: str) -> Lane | None:
    """The lane a queue name is, if it is one of `partition`'s (its poison queue and other partitions' queues
    that share the prefix are not). A hashed lane's tenant is `#<hash>` until its mark names the id."""
    if name == partition:
        return Lane(partition)
    if not name.startswith(partition + "-"):
        return None
    kind, sep, tenant = name[len(partition) + 1 :].partition("-")
    if not sep:
        return None
    if kind in ("tx", "hx") and HASHED.fullmatch(tenant):
        return Lane(partition, HASHED_PREFIX + tenant, Priority.HIGH if kind == "hx" else Priority.NORMAL)
    if not PLAIN.fullmatch(tenant):
        return None
    if kind == "h":
        return Lane(partition, tenant, Priority.HIGH)
    if kind == "t" and tenant != DEFAULT_TENANT:
        return Lane(partition, tenant)
    return None


def named(lane: Lane, tenant: str | None) -> Lane:
    """`lane` (parsed from its queue name) with the tenant id its mark keeps, if that id is the lane's."""
    if tenant is None or not TENANT.fullmatch(tenant) or tenant == lane.tenant:
        return lane
    real = Lane(lane.partition, tenant, lane.priority)
    return real if real.name == lane.name else lane


def checked_tenant(raw: str | None) -> str:
    """A submit's tenant: absent means the shared one. The error names the rule (the API turns it into a 400)."""
    if raw is None:
        return DEFAULT_TENANT
    if not TENANT.fullmatch(raw):
        raise ValueError(f"tenant must be 1-{TENANT_MAX} characters of A-Z a-z 0-9 . _ : - (a UUID or a name)")
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
    due_at: float = 0.0  # monotonic: when to receive from it next (0: now; inf: only when its mark moves)
    worked: bool = False  # a page of it held messages this session (some may come back after a retry delay)
    came_back_empty: bool = False  # its last page was empty, and its mark has not moved since


@dataclass
class LaneOrder:
    """Which lane a receiver takes its next page from. Not thread-safe; one event loop.

    A lane is received from when it is new, when its mark moves (a submit or a replay since), or, in a session
    that took work from it, `recheck_s` after it came back empty (a retry may come back). A lane the quiet
    record (`start`) says was found empty at its current mark is not received from at all: an idle lane costs
    a session nothing, and a session ends once every lane it looked at came back empty."""

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
            # A submit still storing: its chunks would only be put back until its commit marks the lane again.
            waits = mid_drain and (stamp is None or storing(stamp)) and name != lane.partition
            if state is None:
                self.lanes[name] = LaneState(lane, stamp, now + self.recheck_s if waits else 0.0)
                if not waits:
                    woken.append(name)
            elif stamp != state.stamp:  # a submit since the last listing, whether or not the lane was due
                # Submits overlapping: a mark before storing that follows another may hide the first submit's
                # commit mark, come and gone between two listings, and its chunks wait in the lane: due now.
                waits = waits and not storing(state.stamp)
                state.stamp = stamp
                state.due_at = min(state.due_at, now + self.recheck_s) if waits else 0.0
                state.came_back_empty = False
                if not waits:
                    woken.append(name)
            if state is not None and lane.tenant != state.lane.tenant:
                state.lane = lane  # its mark now names the tenant
        return woken

    def add(self, lane: Lane) -> None:
        self.lanes.setdefault(lane.name, LaneState(lane))

    def start(self, quiet: dict[str, str]) -> None:
        """A session starts: every lane is looked at, but those `quiet` (name: the mark they were last found
        empty at) still holds at their mark."""
        for name, state in self.lanes.items():
            still = quiet.get(name) == (state.stamp or "")
            state.due_at = math.inf if still else 0.0
            state.worked = False
            state.came_back_empty = still

    def wake_all(self) -> None:
        """Every lane is looked at (no quiet record)."""
        self.start({})

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

    def may_take(self, name: str, now: float) -> bool:
        """Whether a page of `name` out of turn (an express page) keeps the HIGH_BURST bound: a high lane's
        only while fewer than HIGH_BURST high pages went in a row or no normal lane is due. Counts it if so."""
        state = self.lanes.get(name)
        if state is None:
            return False
        if not state.lane.high:
            self._high_run = 0
            return True
        if self._high_run >= self.high_burst and self._due(Priority.NORMAL, now):
            return False
        self._high_run += 1
        return True

    def _take(self, priority: str, due: list[str]) -> str:
        """Round robin by name: the first due lane after the one that had the last turn."""
        last = self._last.get(priority)
        chosen = next((n for n in due if last is None or n > last), due[0])
        self._last[priority] = chosen
        return chosen

    def pause(self, name: str, until: float) -> None:
        """Its handler's downstream is overloaded: not due before `until`."""
        state = self.lanes.get(name)
        if state is not None:
            state.due_at = max(state.due_at, until)

    def gave(self, name: str) -> None:
        """A page of it held messages."""
        state = self.lanes.get(name)
        if state is not None:
            state.worked = True
            state.came_back_empty = False

    def emptied(self, name: str, now: float) -> None:
        """A page came back empty: not due again until its mark moves, or, if it gave work this session,
        `recheck_s` later (a message it holds may come back after a retry delay)."""
        state = self.lanes.get(name)
        if state is not None:
            state.due_at = now + self.recheck_s if state.worked else math.inf
            state.came_back_empty = True

    def to_confirm(self, quiet: dict[str, str]) -> list[str]:
        """Lanes that came back empty at a mark the quiet record does not hold yet (a depth read each confirms
        no message is hidden in them before they are recorded)."""
        return sorted(n for n, s in self.lanes.items() if s.came_back_empty and quiet.get(n) != (s.stamp or ""))

    def maybe_holding(self, quiet: dict[str, str]) -> list[str]:
        """Lanes that may hold work: all but those the quiet record holds at their current mark."""
        return sorted(n for n, s in self.lanes.items() if quiet.get(n) != (s.stamp or ""))

    def committed(self) -> list[tuple[str, str]]:
        """The (batch id, attempt) each lane's mark, as last listed, says its submit committed."""
        return [c[:2] for s in self.lanes.values() if (c := committed_in(s.stamp)) is not None]


def mark_text(epoch_ms: int, nonce: str, committed: tuple[str, str] | None = None, *, storing: bool = False) -> str:
    """A lane's mark: when (for a submit's, the batch's acceptance) and by which writer, and the batch and attempt
    a submit committed, or that a submit is storing into it (queue metadata: ASCII)."""
    stamp = f"{epoch_ms}-{nonce}"
    if storing:
        return f"{stamp}-{STORING}"
    return stamp if committed is None else f"{stamp}-{committed[0]}-{committed[1]}"


def storing(mark: str | None) -> bool:
    """Whether a mark is a submit's before it stores (its batch not committed yet)."""
    return (mark or "").endswith("-" + STORING)


def committed_in(mark: str | None) -> tuple[str, str, int] | None:
    """The (batch id, attempt, accepted epoch ms) a mark says was committed, or None for a mark that says none
    (or is not ours)."""
    parts = (mark or "").split("-")
    if len(parts) != 4 or not parts[0].isascii() or not parts[0].isdigit():
        return None
    if not all(p.isascii() and p.isalnum() for p in parts[2:]):
        return None
    return parts[2], parts[3], int(parts[0])
