"""bench.cost: the monthly bill against a case worked out by hand, and the table it writes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import cost

# A made-up system, so every figure below can be worked out on paper from bench.cost's prices.
CASE = cost.Counts(
    storage_per_item=0.01,
    blob_writes_per_item=0.001,
    blob_reads_per_item=0.0,
    items_per_s=1000.0,
    executions_per_item=0.004,
    idle_storage_per_day=100.0,
)


def test_a_month_of_one_million_items_a_day_matches_the_bill_worked_out_by_hand() -> None:
    bill = cost.monthly_bill(CASE, 1_000_000, app=True)
    # 30 days: 30,000,000 items.
    # blob writes 30,000 -> 3 x $0.05 = $0.15; queue ops 300,000 - 30,000 + 100 x 30 = 273,000 -> 27.3 x $0.004
    assert bill["storage"] == pytest.approx(0.15 + 0.1092)
    # 30,000 batches x (5 + 2 looks x 3) = 330,000 operations -> 0.33 x $0.05
    assert bill["service_bus"] == pytest.approx(0.0165)
    # 30,000 s of draining x 2 GB = 60,000 GB-s x $0.000026 = $1.56; 120,000 + 4 x 30 executions x $0.40/million
    assert bill["execution"] == pytest.approx(1.56 + 0.12012 * 0.40)
    assert bill["always_ready"] == 0
    # (120,120 executions + 120,000 chunks) x 1,000 bytes = 0.24012 GB x $2.30
    assert bill["log_analytics"] == pytest.approx(0.24012 * 2.30)


def test_an_always_ready_instance_costs_its_baseline_around_the_clock() -> None:
    one = replace(cost.Assumptions(), always_ready=1)
    bill = cost.monthly_bill(CASE, 0, app=True, assume=one)
    # 1 x 2 GB x 2,592,000 s = 5,184,000 GB-s x $0.000004
    assert bill["always_ready"] == pytest.approx(20.736)
    # idle: 100 transactions a day x 30 = 3,000 -> $0.0012; 4 timer executions a day
    assert bill["storage"] == pytest.approx(0.0012)
    assert bill["execution"] == pytest.approx(120 / 1e6 * 0.40)


def test_every_price_names_its_source_and_date() -> None:
    for name, price in cost.PRICES.items():
        assert price.usd > 0, name
        assert price.source, name
        assert price.as_of, name


def test_the_table_sets_both_systems_side_by_side_at_each_volume_from_the_bench_results() -> None:
    rows = cost.table(cost.measured_counts())
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
    markdown = cost.markdown(rows)
    table_lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(table_lines) == len(rows) + len(cost.PRICES) + 2  # each table's header too


def test_benchmarks_md_carries_the_money_section_the_generator_writes() -> None:
    text = (cost.RESULTS.parent.parent / "BENCHMARKS.md").read_text()
    assert cost.section().strip() in text
