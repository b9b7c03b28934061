"""The drainer's pause when the handler says its downstream is overloaded (pure: the clock is passed in).

A chunk whose handler raised `Overloaded` is put back without counting an attempt, and no chunk of the drainer
starts until the pause ends: the signal's Retry-After, or a back-off that doubles with each signal in a row
(OVERLOAD_FIRST_S..OVERLOAD_MAX_S), in whole seconds as a message's visibility is.
"""

from __future__ import annotations

import math

OVERLOAD_FIRST_S = 1.0  # the first pause when the handler says its downstream is overloaded, without Retry-After
OVERLOAD_MAX_S = 60.0  # the longest pause (and the longest Retry-After honoured)


class OverloadPause:
    def __init__(self) -> None:
        self.until = 0.0  # no chunk starts before then (on the drainer's clock)
        self.in_a_row = 0  # the back-off doubles with each, from OVERLOAD_FIRST_S

    def active(self, now: float) -> bool:
        return self.until > now

    def remaining_s(self, now: float) -> float:
        return max(0.0, self.until - now)

    def signal(self, now: float, retry_after_s: float | None) -> int:
        """A new overload signal: extend the pause, and return its length in whole seconds."""
        self.in_a_row += 1
        backoff = min(OVERLOAD_MAX_S, OVERLOAD_FIRST_S * 2 ** (self.in_a_row - 1))
        wanted = retry_after_s if retry_after_s is not None else backoff
        pause = math.ceil(min(OVERLOAD_MAX_S, max(1.0, wanted)))
        self.until = max(self.until, now + pause)
        return pause

    def worked(self) -> None:
        """A chunk ran without an overload: the next signal starts the back-off again."""
        self.in_a_row = 0
