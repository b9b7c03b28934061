"""The drainer's pauses when the handler says its downstream is overloaded (pure: the clock is passed in).

A chunk whose handler raised `Overloaded` is put back without counting an attempt (at most MAX_SKIPS times:
`shared.engine.settling`), and no chunk of the same lane starts until the lane's pause ends: the signal's
Retry-After, or a back-off that doubles with each signal in a row (OVERLOAD_FIRST_S..OVERLOAD_MAX_S), in whole
seconds as a message's visibility is. Other lanes (tenants) go on. Chunks that were already running when a
pause began and report the same overload are the same signal: they neither double the back-off nor extend it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OVERLOAD_FIRST_S = 1.0  # the first pause when the handler says its downstream is overloaded, without Retry-After
OVERLOAD_MAX_S = 60.0  # the longest pause (and the longest Retry-After honoured)


@dataclass
class _Lane:
    until: float = 0.0  # no chunk of the lane starts before then (on the drainer's clock)
    in_a_row: int = 0  # the back-off doubles with each, from OVERLOAD_FIRST_S
    began: float = -math.inf  # when the current pause began


class OverloadPause:
    def __init__(self) -> None:
        self._lanes: dict[str, _Lane] = {}

    def until(self, lane: str) -> float:
        state = self._lanes.get(lane)
        return state.until if state is not None else 0.0

    def active(self, lane: str, now: float) -> bool:
        return self.until(lane) > now

    def remaining_s(self, lane: str, now: float) -> float:
        return max(0.0, self.until(lane) - now)

    def soonest(self, now: float) -> float | None:
        """When the first pause still running ends (None: none is)."""
        ends = [s.until for s in self._lanes.values() if s.until > now]
        return min(ends) if ends else None

    def signal(self, lane: str, now: float, retry_after_s: float | None, started: float) -> int:
        """A chunk of `lane` that started at `started` reports an overload: a new signal (the chunk started
        after the last pause began) extends the pause; answers the pause still to wait, in whole seconds."""
        state = self._lanes.setdefault(lane, _Lane())
        if started < state.began:  # it was running when the pause began: the same overload
            return math.ceil(self.remaining_s(lane, now))
        state.in_a_row += 1
        backoff = min(OVERLOAD_MAX_S, OVERLOAD_FIRST_S * 2 ** (state.in_a_row - 1))
        wanted = retry_after_s if retry_after_s is not None else backoff
        pause = math.ceil(min(OVERLOAD_MAX_S, max(1.0, wanted)))
        state.until = max(state.until, now + pause)
        state.began = now
        return pause

    def worked(self, lane: str) -> None:
        """A chunk of `lane` ran without an overload: the next signal starts the back-off again."""
        state = self._lanes.get(lane)
        if state is not None and state.in_a_row:
            state.in_a_row = 0
