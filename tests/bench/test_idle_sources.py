"""The all-sources idle model (`bench.idle_sources`) against cases worked out by hand.

No service is involved: the model is arithmetic over the host's published lease periods and the app's own back-off
policy at its default settings.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from bench.measures.idle_sources.run import (
    CHAIN_END,
    FLEX,
    PREMIUM,
    SHIPPED_SCHEDULE_S,
    TARGET,
    TICK_LISTINGS,
    HostCosts,
    app_day,
    break_even_linger_s,
    builtin_day,
    fallback_looks,
    range_table,
    shipped_policy,
    table,
)
from bench.measures.platform.params import setting_default
from emulators.functions.ncrontab import parse

COSTS = HostCosts()  # 12 s host-lock renewals, 30 s listener-lock renewals, 10 s probes, 5 min linger
# Per Flex start, counted by hand: the host keys read twice (exists + download, at start and at the sync 30 s
# later), each of the app's 13 HTTP functions' keys (2 calls each), one hash blob: 2 + 2 + 26 + 1.
SECRETS_PER_FLEX_START = 31


def test_the_app_declares_thirteen_http_functions_whose_keys_the_flex_sync_reads() -> None:
    assert COSTS.http_functions == 13
    assert COSTS.secrets_per_start(flex=True) == SECRETS_PER_FLEX_START
    assert COSTS.secrets_per_start(flex=False) == 2  # Premium: the host keys at start only
    assert replace(COSTS, http_functions=3).secrets_per_start(flex=True) == 2 + 2 + 6 + 1


def test_an_instance_alive_all_day_renews_the_host_lock_every_12_s_and_the_timer_lock_every_30_s() -> None:
    day = app_day(PREMIUM, 1, 60.0, COSTS, shipped_policy()).sources
    assert day["primary-host lock"] == 4 + 86_400 // 12  # one acquire (4 calls), 7,200 renewals, never released
    assert day["timer listener lock"] == 2 + 86_400 // 30  # one acquire (2 calls), 2,880 renewals


def test_a_timer_within_the_linger_keeps_a_flex_instance_alive_as_premium_does() -> None:
    flex = app_day(FLEX, 1, 60.0, COSTS, shipped_policy()).sources
    premium = app_day(PREMIUM, 1, 60.0, COSTS, shipped_policy()).sources
    # One start each; Flex's start adds the key sync and the package download.
    assert flex["host secrets at start"] - premium["host secrets at start"] == SECRETS_PER_FLEX_START - 2
    assert (flex["package download"], premium["package download"]) == (1, 0)
    same = ("fallback looks", "fresh-instance reads", "primary-host lock", "timer listener lock", "look chain")
    assert all(flex[k] == premium[k] for k in same)


def test_a_timer_every_four_hours_wakes_six_instances_that_each_live_five_minutes() -> None:
    day = app_day(FLEX, 1, 4 * 3600.0, COSTS, shipped_policy()).sources
    # 6 acquires of 4 calls, 25 renewals per 5-minute life, 6 releases
    assert day["primary-host lock"] == 6 * 4 + 6 * 300 // 12 + 6 == 180
    assert day["timer listener lock"] == 6 * 2 + 6 * 300 // 30 + 6 == 78
    assert day["fresh-instance reads"] == 6 * 2  # the state container and the queue's back-off state, per start
    assert day["host secrets at start"] == 6 * SECRETS_PER_FLEX_START
    assert day["package download"] == 6
    assert day["look chain"] == 1 + 2 + 1 + 2  # the look that ends the chain: read, look, write, look again
    twenty = app_day(FLEX, 1, 4 * 3600.0, replace(COSTS, linger_s=1200.0), shipped_policy()).sources
    assert twenty["primary-host lock"] == 6 * 4 + 6 * 1200 // 12 + 6


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
    assert premium["primary-host lock"] == 4 + 7_200
    assert premium["host secrets at start"] == 2
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
    assert {r["linger_s"] for r in shipped} == {30.0, 300.0, 1_200.0}
    assert all(r["c_over_a"] <= TARGET for r in shipped), [(r["linger_s"], r["c_over_a"]) for r in shipped]
    # By hand, 5-minute linger: 4 wakes x (host lock 4 + 25 + 1, listener lock 2 + 10 + 1, secrets 31, package 1,
    # reads 2) = 308, looks 4 x 2 reads + 4 interval writes = 12, the ticks' listings 4 x 3 = 12 (notices, batch index,
    # replay notes), the chain's last look 6: 338 against 8,640 probes.
    five = next(r for r in shipped if r["linger_s"] == 300.0)
    assert five["c_total"] == 4 * (30 + 13 + 31 + 1 + 2) + 12 + 4 * TICK_LISTINGS + CHAIN_END == 338
    minute = next(r for r in table() if r["plan"] == FLEX.name and r["queues"] == 1 and r["schedule_s"] == 60)
    assert minute["c_over_a"] > 1, "the design before: a minute timer keeps an instance, and its locks, alive"


def test_the_target_holds_up_to_a_linger_of_23_minutes_at_ten_second_probes_and_not_at_all_at_a_minute() -> None:
    # By hand: 180 + 4L/12 + 4L/30 + 18 <= 864 gives L <= 1,427 s; at L = 1,380 s: 180 + 460 + 184 + 18 = 842,
    # at 1,440 s: 180 + 480 + 192 + 18 = 870 (180: 168 per wake and look as before, and the ticks' 12 listings).
    linger_s = break_even_linger_s(TARGET)
    assert linger_s == 23 * 60
    # Probes every 60 s make (a) 1,440 a day: even a 1-minute linger costs 180 + 20 + 8 + 18 = 226 > 144.
    assert break_even_linger_s(TARGET, probe_s=60.0) == 0.0
    over = app_day(FLEX, 1, SHIPPED_SCHEDULE_S, replace(COSTS, linger_s=linger_s + 60), shipped_policy()).total
    assert over > TARGET * builtin_day(FLEX, 1, COSTS).total


def test_across_the_unpublished_range_an_idle_app_stays_under_the_builtin_trigger() -> None:
    rows = range_table()
    one = [r for r in rows if r["queues"] == 1]
    assert len(one) == 9
    # The two ends by hand. Per start: reads 2, secrets 31, package 1, host lock 4 + 1, listener lock 2 + 1 = 42;
    # renewals over the day's alive time (4 lives); looks and the chain's end 18; the ticks' listings 12. 30 s
    # linger: 120 s alive, 10 host and 4 listener renewals: 168 + 14 + 18 + 12 = 212 against 8,640 probes (10 s).
    # 20-minute linger: 4,800 s alive, 400 + 160 renewals: 168 + 560 + 18 + 12 = 758 against 1,440 probes (60 s).
    low = next(r for r in one if r["linger_s"] == 30.0 and r["probe_s"] == 10.0)
    high = next(r for r in one if r["linger_s"] == 1_200.0 and r["probe_s"] == 60.0)
    assert (low["c_total"], low["a_total"]) == (212, 8_640)
    assert (high["c_total"], high["a_total"]) == (758, 1_440)
    assert max(r["c_over_a"] for r in rows) < 1
