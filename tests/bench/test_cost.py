"""bench.cost: the monthly bill against a case worked out by hand, Microsoft's billing rules it follows, and the
table it writes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import cost

# A made-up system, so every figure below can be worked out on paper from bench.cost's prices.
CASE = cost.Counts(
    per_item={"queue": 0.01, "blob_write": 0.001},
    per_batch={"blob_write": 3.0, "blob_other": 2.0},
    per_start={"blob_list_create": 3.0},
    idle_per_day={"queue": 100.0},
    items_per_s=1000.0,
    drain_executions_per_batch=1.0,
    submits_per_batch=1.0,
    looks_per_batch=2.0,
    push=True,
)


def test_a_month_of_one_million_items_a_day_matches_the_bill_worked_out_by_hand() -> None:
    bill = cost.monthly_bill(CASE, 1_000_000)
    # 30 days, 1,000 batches a day; 288 process starts a day at most (a 5-minute linger).
    # queue: (10,000 + 100) x 30 = 303,000 -> 30.3 x $0.004; blob writes (1,000 + 3,000) x 30 = 120,000 -> 12 x $0.05;
    # other (leases) 2,000 x 30 = 60,000 -> 6 x $0.004; create container 3 x 288 x 30 = 25,920 -> 2.592 x $0.05
    assert bill["storage"] == pytest.approx(30.3 * 0.004 + 12 * 0.05 + 6 * 0.004 + 2.592 * 0.05)
    # 30,000 batches x (5 + 2 looks x 3) = 330,000 operations -> 0.33 x $0.05
    assert bill["service_bus"] == pytest.approx(0.0165)
    # Every busy period bills at least 1 s: a drain of 1 s (1,000 items at 1,000/s), 2 looks, 1 submit a batch;
    # the timer 4 a day. (3,000 + 1,000 + 4) s x 30 x 2 GB x $0.000026; executions (4 x 1,000 + 4) x 30 x $0.40/M.
    assert bill["execution"] == pytest.approx(4_004 * 30 * 2 * 0.000026 + 4_004 * 30 / 1e6 * 0.40)
    assert bill["always_ready"] == 0
    # (120,120 executions + 120,000 chunks) x 1,000 bytes = 0.24012 GB x $2.30
    assert bill["log_analytics"] == pytest.approx(0.24012 * 2.30)


def test_a_short_execution_bills_the_minimum_period_and_close_ones_merge_into_an_instance_busy_all_day() -> None:
    # 1,000 executions of 10 ms a day: 1,000 s billed, not 10 s (Flex Consumption's 1,000 ms minimum).
    assert cost.busy_s_per_day([(1_000, 0.01)], 1.0) == pytest.approx(1_000)
    # 200,000 a day of 10 ms: they come closer than a second, so one instance is busy all day, not 200,000 s.
    assert cost.busy_s_per_day([(200_000, 0.01)], 1.0) == cost.SECONDS_PER_DAY
    # 0.5 s of work 300,000 times a day is 150,000 s of work: two instances, busy all day (not 300,000 s billed).
    assert cost.busy_s_per_day([(300_000, 0.5)], 1.0) == 2 * cost.SECONDS_PER_DAY
    # Work longer than the minimum is billed as it is.
    assert cost.busy_s_per_day([(10_000, 2.0)], 1.0) == pytest.approx(20_000)
    assert cost.busy_s_per_day([(0, 5.0)], 1.0) == 0


def test_an_always_ready_instance_costs_its_baseline_around_the_clock_and_bills_the_drain_at_its_own_rate() -> None:
    one = replace(cost.Assumptions(), always_ready=1)
    idle = cost.monthly_bill(CASE, 0, assume=one)
    # 1 x 2 GB x 2,592,000 s = 5,184,000 GB-s x $0.000004
    assert idle["always_ready"] == pytest.approx(20.736)
    # idle: 100 queue operations a day x 30 = 3,000 -> $0.0012; 4 timer executions a day, 1 s each, on demand
    assert idle["storage"] == pytest.approx(0.0012)
    assert idle["execution"] == pytest.approx(4 * 30 * 2 * 0.000026 + 120 / 1e6 * 0.40)
    busy = cost.monthly_bill(CASE, 1_000_000, assume=one)
    # the drain function's 3,000 s a day at the always-ready execution rate, the submits and timer on demand
    drain, others = 3_000 * 30 * 2 * 0.000016, 1_004 * 30 * 2 * 0.000026
    assert busy["execution"] == pytest.approx(drain + others + 4_004 * 30 / 1e6 * 0.40)


def test_each_storage_operation_is_priced_by_the_category_microsoft_bills_it_in() -> None:
    assert cost.category("blob.LeaseBlob.Acquire") == "blob_other"  # "Other", not a write
    assert cost.category("blob.LeaseBlob.Renew") == "blob_other"
    assert cost.category("blob.ListBlobs") == "blob_list_create"  # priced with "List and create container"
    assert cost.category("blob.CreateContainer") == "blob_list_create"
    assert cost.category("blob.DeleteBlob") == "free"
    assert cost.category("blob.PutBlob") == "blob_write"
    assert cost.category("blob.GetBlob") == "blob_read"
    assert cost.category("queue.DeleteMessage") == "queue"
    free_only = replace(CASE, per_item={"free": 5.0}, per_batch={}, per_start={}, idle_per_day={})
    assert cost.monthly_bill(free_only, 1_000_000)["storage"] == 0


def test_every_price_names_its_source_and_date() -> None:
    for name, price in cost.PRICES.items():
        assert price.usd > 0, name
        assert price.source, name
        assert price.as_of, name
    assert cost.PRICES["flex_minimum_billable_s"].usd == 1.0


def test_the_table_sets_both_systems_side_by_side_at_each_volume_from_the_bench_results() -> None:
    rows = cost.table(cost.measured_counts())
    assert [r["volume"] for r in rows[::2]] == ["idle", "10^4 items a day", "10^6 items a day", "10^8 items a day"]
    assert [(r["volume"], r["system"]) for r in rows] == [
        (volume, system) for volume, _ in cost.VOLUMES for system in ("queue-drain", "built-in queue trigger")
    ]
    for row in rows:
        parts = ("storage", "service_bus", "execution", "always_ready", "log_analytics")
        assert row["total"] == pytest.approx(sum(row[p] for p in parts))
    by = {(r["volume"], r["system"]): r for r in rows}
    for volume, _ in cost.VOLUMES[1:]:
        # the built-in trigger pays a transaction pair and an execution for every item
        assert by[volume, "queue-drain"]["storage"] < by[volume, "built-in queue trigger"]["storage"] / 10
    # At 10^6 items a day the app's short executions bill at least 1 s each: about 4,000 a day.
    app = by["10^6 items a day", "queue-drain"]
    assert app["execution"] > 4_000 * 30 * 2 * 0.000026
    markdown = cost.markdown(rows)
    assert "| `blob.ListBlobs` | blob_list_create |" in markdown


def test_benchmarks_md_and_deploying_md_carry_the_money_figures_the_generator_writes() -> None:
    root = cost.RESULTS.parent.parent
    assert cost.section().strip() in (root / "BENCHMARKS.md").read_text()
    table = cost.markdown(cost.table(cost.measured_counts())).split("\n\n")[0]
    assert table in (root / "docs/deploying.md").read_text()
