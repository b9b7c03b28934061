"""The peers' polling policies against their documented formulas, and their loops on a simulated clock."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.measures.idle.run import simulate_peer
from bench.peers import builtin_trigger, capped_backoff, whitepaper
from bench.peers.base import SimQueue
from bench.peers.builtin_trigger import RandomizedExponentialBackoff
from bench.tools.clock import SimClock
from bench.tools.handlers import noop_items


def test_the_queue_trigger_backs_off_by_the_sdk_formula_and_stays_at_the_cap_without_jitter() -> None:
    backoff = RandomizedExponentialBackoff()
    u = 0.75  # spread 0.8 + 0.4 * 0.75 = 1.1
    delays = [backoff.next_delay(succeeded=False, u=u) for _ in range(14)]
    assert delays[0] == pytest.approx(0.1)  # never found work: the minimum first
    for k in range(1, 11):
        assert delays[k] == pytest.approx(0.1 + 1.1 * 2 ** (k - 1) * 0.1)
    assert delays[11:] == [60.0] * 3


def test_any_message_resets_the_queue_trigger_to_the_minimum_then_it_grows_again() -> None:
    backoff = RandomizedExponentialBackoff()
    for _ in range(20):
        backoff.next_delay(succeeded=False, u=0.5)
    assert backoff.next_delay(succeeded=True, u=0.5) == pytest.approx(0.1)
    assert backoff.next_delay(succeeded=False, u=0.0) == pytest.approx(0.1 + 0.8 * 0.1)
    assert backoff.next_delay(succeeded=False, u=1.0) == pytest.approx(0.1 + 1.2 * 0.2)


@given(st.lists(st.floats(min_value=0, max_value=0.999999), min_size=1, max_size=40))
def test_queue_trigger_delays_stay_within_the_randomized_band_and_the_cap(draws: list[float]) -> None:
    backoff = RandomizedExponentialBackoff()
    backoff.next_delay(succeeded=True, u=0.5)
    for k, u in enumerate(draws, start=1):
        delay = backoff.next_delay(succeeded=False, u=u)
        if delay != 60.0:
            assert 0.1 + 0.8 * 2 ** (k - 1) * 0.1 <= delay + 1e-9
            assert delay <= 0.1 + 1.2 * 2 ** (k - 1) * 0.1 + 1e-9
        assert delay <= builtin_trigger.MAX_POLLING_INTERVAL_S


def test_the_capped_poller_doubles_from_one_second_to_sixty_and_resets_on_a_message() -> None:
    interval, seen = capped_backoff.FLOOR_S, []
    for _ in range(8):
        seen.append(interval)
        interval = capped_backoff.next_interval(interval, found=False)
    assert seen == [1, 2, 4, 8, 16, 32, 60, 60]
    assert capped_backoff.next_interval(60, found=True) == 1


def test_the_whitepaper_delay_follows_its_formula_up_to_one_second() -> None:
    assert whitepaper.idle_delay(1, u=0.5) == pytest.approx(0.1 + 1 * 0.1)
    assert whitepaper.idle_delay(2, u=0.0) == pytest.approx(0.1 + 3 * 0.08)
    assert whitepaper.idle_delay(3, u=1.0) == pytest.approx(0.1 + 7 * 0.12)
    assert whitepaper.idle_delay(4, u=0.0) == 1.0
    assert whitepaper.idle_delay(500, u=0.0) == 1.0


def test_the_whitepaper_scales_dequeue_tasks_by_queue_depth() -> None:
    assert [whitepaper.dequeue_tasks_for_depth(d) for d in (0, 99, 100, 999, 1000, 10**6)] == [10, 10, 50, 50, 100, 100]


async def test_a_simulated_hour_of_each_idle_peer_costs_what_its_policy_says() -> None:
    hour = 3600.0
    a, b, c, d = [await simulate_peer(kind, hour) for kind in "abcd"]
    # (a): about 100 s to reach the cap, then one GetMessages a minute
    assert 58 + 10 <= a["queue.GetMessages"] <= 60 + 12
    assert b == {"queue.GetMessages": 3600}
    assert 58 + 5 <= c["queue.GetMessages"] <= 60 + 7  # 1+2+...+32 s, then every 60 s
    assert d["queue.GetMessages"] == d["queue.GetQueueMetadata"]
    assert 3590 <= d["queue.GetMessages"] <= 3605  # one second apart after the first few polls


async def test_the_whitepaper_listener_winds_extra_dequeue_tasks_down_to_one_when_idle() -> None:
    listener = whitepaper.WhitepaperListener(SimQueue(), noop_items, SimClock(), seed=3)
    listener.until = 30.0
    listener.tasks = set()
    listener.start_tasks(10)
    while listener.tasks and listener.running():
        await asyncio.wait(set(listener.tasks), return_when=asyncio.FIRST_COMPLETED)
    assert listener.active() <= 1
