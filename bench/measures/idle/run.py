"""Idle storage transactions per queue per day, from each policy's real code on a simulated clock.

A peer runs its own loop (`bench.peers`) on a `SimClock` against `SimQueue`, an always-empty queue that counts each
call as the operation it stands for. The app runs its real `fallback.poll` against the real Azurite, once per timer
tick (FALLBACK_SCHEDULE, every minute), with the simulated time passed as `clock_ms`; its storage transactions are
counted by the app's own metering. The real-time idle run (`bench.measures.latency`) is the cross-check: the same
code over the same span in real time, counted at the client."""

from __future__ import annotations

import math
from typing import Any

from bench.peers import PEERS
from bench.peers.base import SimQueue
from bench.tools.clock import SimClock
from bench.tools.config import app_env
from bench.tools.handlers import noop_items
from shared import runtime
from shared.core.settings import Settings
from shared.telemetry import metering
from shared.watch.fallback import poll

DAY_S = 86_400.0
TICK_S = 60.0  # the default FALLBACK_SCHEDULE, 0 */1 * * * *


async def simulate_peer(kind: str, seconds: float, seed: int = 0) -> dict[str, int]:
    queue = SimQueue()
    peer = PEERS[kind](queue, noop_items, SimClock(), seed=seed)
    peer.until = seconds
    await peer.run()
    return dict(sorted(queue.counts.items()))


async def simulate_app(
    storage: str, servicebus: str, token: str, role: str, seconds: float, first_tick_s: float = TICK_S
) -> dict[str, int]:
    """The timer fires at `first_tick_s`, then every minute, until `seconds`; the queue stays empty."""
    env = app_env(storage, servicebus, role, token, HANDLER="shared.handlers.noop:handle")
    runtime.configure(Settings.from_env(env))
    services = runtime.services()
    ticks = max(0, math.floor((seconds - first_tick_s) / TICK_S) + 1) if seconds >= first_tick_s else 0
    base_ms = 1_700_000_000_000
    with metering.tally() as tally:
        for k in range(ticks):
            now_ms = base_ms + round((first_tick_s + k * TICK_S) * 1000)
            await poll(services, clock_ms=lambda now_ms=now_ms: now_ms)
    await runtime.close()
    return dict(sorted(tally.items()))


def per_day(counts: dict[str, int], seconds: float) -> float:
    return sum(counts.values()) * DAY_S / seconds


async def simulate_all(storage: str, servicebus: str, token: str, real: dict[str, Any]) -> dict[str, Any]:
    """Per day from a simulated day; and the real-time window simulated again, to set beside the real count."""
    out: dict[str, Any] = {}
    for kind in PEERS:
        day = await simulate_peer(kind, DAY_S, seed=1)
        window_s = float(real[kind]["seconds"])
        window = await simulate_peer(kind, window_s, seed=2)
        out[kind] = cross_check(day, window, real[kind], window_s)
    app_real = real["app"]
    day = await simulate_app(storage, servicebus, token, "sim", DAY_S)
    window = await simulate_app(
        storage, servicebus, token, "simw", float(app_real["seconds"]), float(app_real["first_tick_s"])
    )
    out["app"] = cross_check(day, window, app_real, float(app_real["seconds"]))
    return out


def cross_check(day: dict[str, int], window: dict[str, int], real: dict[str, Any], window_s: float) -> dict[str, Any]:
    real_counts = dict(real["transactions"])
    return {
        "simulated_day": day,
        "per_day": sum(day.values()),
        "window_s": window_s,
        "simulated_window": window,
        "simulated_window_total": sum(window.values()),
        "real_window": real_counts,
        "real_window_total": sum(real_counts.values()),
    }
