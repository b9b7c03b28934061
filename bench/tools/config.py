"""Sizes of a full run (`make bench`) and a quick one (`make bench-quick`), and the app settings per phase."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BenchConfig:
    name: str
    app_backlog_items: int  # the app's drain backlog (the 200,000)
    peer_backlog_items: int  # the peers' backlog drained in full: one message per item is slow on Azurite at depth
    deep_backlog_items: int  # the peers' rate on a backlog this deep (one shared queue, a window each)
    deep_window_s: float  # how long each peer drains the deep backlog
    raw_rounds: int  # rounds of the raw GetMessages+Delete limit, per concurrency level
    raw_concurrency: tuple[int, ...]
    paired_rounds: int  # raw loop and app drain back to back (`bench.measures.raw_limit.paired`)
    latency_lanes: int  # independent instances of each peer, each on its own queue
    latency_per_lane: int  # submissions per lane
    latency_gap_s: tuple[float, float]  # idle gap before each submission, uniform in this range
    latency_batch_items: int
    idle_real_s: float  # the real-time idle run (the issue asks for at least 10 minutes)
    profile_items: int  # backlog of the profiled drain (0: no profile)
    seed: int = 20240601


FULL = BenchConfig(
    name="full",
    app_backlog_items=200_000,
    peer_backlog_items=3_000,
    deep_backlog_items=200_000,
    deep_window_s=45.0,
    raw_rounds=5,
    raw_concurrency=(1, 2, 4, 8, 16),
    paired_rounds=3,
    latency_lanes=10,
    latency_per_lane=5,
    latency_gap_s=(20.0, 180.0),
    latency_batch_items=100,
    idle_real_s=630.0,
    profile_items=100_000,
)

QUICK = BenchConfig(
    name="quick",
    app_backlog_items=20_000,
    peer_backlog_items=300,
    deep_backlog_items=5_000,
    deep_window_s=5.0,
    raw_rounds=2,
    raw_concurrency=(1, 4, 16),
    paired_rounds=2,
    latency_lanes=3,
    latency_per_lane=2,
    latency_gap_s=(5.0, 30.0),
    latency_batch_items=50,
    idle_real_s=90.0,
    profile_items=0,
)


def app_env(storage: str, servicebus: str, role: str, token: str, **extra: str) -> dict[str, str]:
    """App settings for one phase: its own queue, containers and trigger queue, the app's defaults otherwise."""
    env = {
        "AzureWebJobsStorage": storage,
        "ServiceBusConnection": servicebus,
        "TRIGGER_QUEUE": trigger_queue(role, token),
        "FALLBACK_SCHEDULE": "0 */1 * * * *",
        "WORK_QUEUE": f"{role}-{token}",
        "BATCHES_CONTAINER": f"{role}-batches-{token}",
        "RESULTS_CONTAINER": f"{role}-results-{token}",
        "STATE_CONTAINER": f"{role}-state-{token}",
    }
    env.update(extra)
    return env


def trigger_queue(role: str, token: str) -> str:
    return f"trigger-{role}-{token}"


ROLES = ("tput", "paired", "latency", "idle", "sim", "profile")
