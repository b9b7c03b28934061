"""When the latency run submits, and how its observations turn into latencies (pure)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    index: int
    lane: int
    at_s: float  # seconds after the run's start


def submissions(
    lanes: int, per_lane: int, gap_s: tuple[float, float], rng: random.Random, *, min_spacing_s: float = 3.0
) -> list[Event]:
    """Each lane submits `per_lane` times, each after an idle gap drawn uniformly from `gap_s`; submissions of
    different lanes are at least `min_spacing_s` apart (a later one is pushed back), so batches never overlap."""
    times: list[tuple[float, int]] = []
    for lane in range(lanes):
        t = 0.0
        for _ in range(per_lane):
            t += rng.uniform(*gap_s)
            times.append((t, lane))
    times.sort()
    events: list[Event] = []
    last = -min_spacing_s
    for index, (t, lane) in enumerate(times):
        at = max(t, last + min_spacing_s)
        events.append(Event(index, lane, at))
        last = at
    return events


@dataclass(frozen=True)
class Observed:
    first_s: float  # monotonic time the first item of the batch was handled
    done_s: float  # monotonic time the last one was


def observations(lines: Iterable[str], expected: dict[str, int]) -> dict[str, Observed]:
    """From `<monotonic> <tag> <items>` lines: for each tag, when its first item and its last were handled."""
    first: dict[str, float] = {}
    seen: dict[str, int] = {}
    done: dict[str, float] = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[1] not in expected:
            continue
        t, tag, n = float(parts[0]), parts[1], int(parts[2])
        first[tag] = min(first.get(tag, t), t)
        seen[tag] = seen.get(tag, 0) + n
        if seen[tag] >= expected[tag] and tag not in done:
            done[tag] = t
    return {tag: Observed(first[tag], done[tag]) for tag in done}
