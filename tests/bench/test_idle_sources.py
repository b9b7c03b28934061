"""The all-sources idle model (`bench.idle_sources`) against cases worked out by hand.

No service is involved: the model is arithmetic over the host's published lease periods and the app's own back-off
policy at its default settings.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from bench.idle_sources import (
    CHAIN_END,
    FLEX,
    PREMIUM,
    SHIPPED_SCHEDULE_S,
    TARGET,
    HostCosts,
    app_day,
    break_even_linger_s,
    builtin_day,
    fallback_looks,
    shipped_policy,
    table,
)
from bench.platform import setting_default
from emulators.functions.ncrontab import parse

COSTS = HostCosts()  # 12 s host-lock renewals, 30 s listener-lock renewals, 10 s probes, 5 min linger


def test_an_instance_alive_all_day_renews_the_host_lock_every_12_s_and_the_timer_lock_every_30_s() -> None:
    day = app_day(PREMIUM, 1, 60.0, COSTS, shipped_policy()).sources
    assert day["primary-host lock"] == 1 + 86_400 // 12  # one acquire, 7,200 renewals
    assert day["timer listener lock"] == 1 + 86_400 // 30  # one acquire, 2,880 renewals


def test_a_timer_within_the_linger_keeps_a_flex_instance_alive_as_premium_does() -> None:
    assert app_day(FLEX, 1, 60.0, COSTS, shipped_policy()) == app_day(PREMIUM, 1, 60.0, COSTS, shipped_policy())


def test_a_timer_every_four_hours_wakes_six_instances_that_each_live_five_minutes() -> None:
    day = app_day(FLEX, 1, 4 * 3600.0, COSTS, shipped_policy()).sources
    assert day["primary-host lock"] == 6 + 6 * 300 // 12  # 6 acquires, 25 renewals per 5-minute life
    assert day["timer listener lock"] == 6 + 6 * 300 // 30
    assert day["fresh-instance reads"] == 6 * 2  # the state container and the queue's back-off state, per start
    assert day["host secrets at start"] == 6
    assert day["look chain"] == 1 + 2 + 1 + 2  # the look that ends the chain: read, look, write, look again
    twenty = app_day(FLEX, 1, 4 * 3600.0, replace(COSTS, linger_s=1200.0), shipped_policy()).sources
    assert twenty["primary-host lock"] == 6 + 6 * 1200 // 12


def test_the_fallbacks_own_looks_are_the_policys_one_minute_doubling_to_thirty() -> None:
    reads, writes = fallback_looks(shipped_policy(), 60.0, seed=1)
    assert writes == 5  # 1 -> 2 -> 4 -> 8 -> 16 -> 30 minutes, then the interval stays put
    # 5 looks in the first 31 minutes, then one per 30 minutes +-10% on minute ticks: about 47 more.
    assert 48 <= reads <= 54, reads
    reads_4h, _ = fallback_looks(shipped_policy(), 4 * 3600.0, seed=1)
    assert reads_4h == 6  # every four-hour tick finds the queue due


def test_the_builtin_trigger_on_flex_costs_only_the_scale_controllers_probes() -> None:
    day = builtin_day(FLEX, 20, COSTS).sources
    assert day == {
        "scale-controller probes": 20 * 8_640,
        "trigger polls": 0,
        "host secrets at start": 0,
        "primary-host lock": 0,
    }
    premium = builtin_day(PREMIUM, 1, COSTS).sources
    assert premium["primary-host lock"] == 7_200
    assert 1_440 <= premium["trigger polls"] <= 1_460  # one a minute once at its 60 s cap, after a short ramp


def test_the_table_covers_both_plans_both_queue_counts_and_every_schedule() -> None:
    rows = table()
    assert {(r["plan"], r["queues"]) for r in rows} == {(p.name, q) for p in (FLEX, PREMIUM) for q in (1, 20)}
    flex_minute = next(r for r in rows if r["plan"] == FLEX.name and r["queues"] == 1 and r["schedule_s"] == 60)
    assert flex_minute["c_total"] > flex_minute["a_total"], "the minute timer keeps the host's locks running"
    assert all(r["c_over_a"] == round(r["c_total"] / r["a_total"], 3) for r in rows)


def test_the_model_runs_the_timer_on_the_schedule_the_app_ships() -> None:
    schedule = parse(setting_default("fallback_schedule"))
    first = schedule.next_occurrence(datetime(2026, 1, 1, 0, 0, 30, tzinfo=timezone.utc))
    assert (schedule.next_occurrence(first) - first).total_seconds() == SHIPPED_SCHEDULE_S


def test_as_shipped_an_idle_one_queue_app_on_flex_costs_at_most_a_tenth_of_the_builtin_trigger() -> None:
    shipped = [r for r in table() if r["plan"] == FLEX.name and r["queues"] == 1 and r["shipped"]]
    assert {r["linger_s"] for r in shipped} == {300.0, 1_200.0}
    assert all(r["c_over_a"] <= TARGET for r in shipped), [(r["linger_s"], r["c_over_a"]) for r in shipped]
    # By hand, 5-minute linger: 4 wakes x (host lock 1 + 25, listener lock 1 + 10, secrets 1, reads 2) = 160,
    # looks 4 x 2 reads + 4 interval writes = 12, the chain's last look 6: 178 against 8,640 probes.
    assert shipped[0]["c_total"] == 4 * (26 + 11 + 1 + 2) + 12 + CHAIN_END == 178
    minute = next(r for r in table() if r["plan"] == FLEX.name and r["queues"] == 1 and r["schedule_s"] == 60)
    assert minute["c_over_a"] > 1, "the design before: a minute timer keeps an instance, and its locks, alive"


def test_the_target_holds_up_to_a_linger_of_about_half_an_hour() -> None:
    linger_s = break_even_linger_s(TARGET)
    assert 25 * 60 <= linger_s <= 30 * 60
    over = app_day(FLEX, 1, SHIPPED_SCHEDULE_S, replace(COSTS, linger_s=linger_s + 60), shipped_policy()).total
    assert over > TARGET * builtin_day(FLEX, 1, COSTS).total
