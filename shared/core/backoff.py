"""Back-off policies as pure functions (milliseconds, keyword-only; randomness passed in as `u` in [0, 1))."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from shared.core.settings import Decrease


def capped_exponential_ms(current_ms: int, *, exponent: float, ceiling_ms: int) -> int:
    """The next interval after an empty poll: `min(ceiling, current * exponent)`."""
    grown: int = math.ceil(current_ms * exponent)
    return min(ceiling_ms, grown)


def decreased_ms(current_ms: int, *, floor_ms: int, decrease: Decrease) -> int:
    """The next interval after a poll that found work: back to the floor, or halved down to it."""
    if decrease is Decrease.RESET:
        return floor_ms
    return max(floor_ms, current_ms // 2)


def jittered_ms(interval_ms: int, *, jitter: float, u: float) -> int:
    """`interval * (1 ± jitter)`, with `u` in [0, 1) choosing where in that band."""
    return max(0, round(interval_ms * (1 - jitter + 2 * jitter * u)))


def randomized_exponential_ms(idle_count: int, *, floor_ms: int, delta_ms: int, ceiling_ms: int, u: float) -> int:
    """The whitepaper's (and the built-in queue trigger's) policy:
    `min(floor + (2**idle - 1) * delta * U(0.8, 1.2), ceiling)`."""
    if idle_count >= 62:  # 2**idle would only be capped anyway
        return ceiling_ms
    spread = 0.8 + 0.4 * u
    growth: int = 2**idle_count - 1
    return min(ceiling_ms, floor_ms + round(growth * delta_ms * spread))


def retry_delay_ms(attempt: int, *, base_ms: int, max_ms: int, jitter: bool, u: float) -> int:
    """Delay before retry number `attempt` (1-based): `base * 2**(attempt-1)`, capped; with jitter,
    uniformly in the upper half of that, so retries of many chunks do not land together."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    exponent = min(attempt - 1, 40)
    delay = min(max_ms, base_ms * 2**exponent)
    if jitter:
        delay = round(delay / 2 + delay / 2 * u)
    return int(delay)


@dataclass(frozen=True)
class PollState:
    """The fallback poller's back-off state for one queue: its interval and when it is next due."""

    interval_ms: int
    next_due_ms: int
    idle_count: int = 0

    def is_due(self, now_ms: int) -> bool:
        return now_ms >= self.next_due_ms


@dataclass(frozen=True)
class PollPolicy:
    floor_ms: int
    ceiling_ms: int
    exponent: float
    jitter: float
    decrease: Decrease

    def initial(self, now_ms: int) -> PollState:
        """A queue never seen before is due at once."""
        return PollState(interval_ms=self.floor_ms, next_due_ms=now_ms)

    def after_idle(self, state: PollState, *, now_ms: int, u: float) -> PollState:
        interval = capped_exponential_ms(state.interval_ms, exponent=self.exponent, ceiling_ms=self.ceiling_ms)
        return replace(
            state,
            interval_ms=interval,
            idle_count=state.idle_count + 1,
            next_due_ms=now_ms + jittered_ms(interval, jitter=self.jitter, u=u),
        )

    def after_work(self, state: PollState, *, now_ms: int, u: float) -> PollState:
        interval = decreased_ms(state.interval_ms, floor_ms=self.floor_ms, decrease=self.decrease)
        return PollState(
            interval_ms=interval, idle_count=0, next_due_ms=now_ms + jittered_ms(interval, jitter=self.jitter, u=u)
        )
