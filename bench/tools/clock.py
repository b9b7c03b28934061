"""Clocks the peers' polling loops take, so one loop runs in real time or on a simulated day.

`time.monotonic()` is CLOCK_MONOTONIC on Linux: one system-wide clock, so timestamps taken in
different processes (the bench, the peers, the function host) compare directly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on this clock."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class SimClock:
    """Simulated time: `sleep` moves the clock on at once (and yields to the loop once)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds)
        await asyncio.sleep(0)
