"""Percentile maths of the benchmark reports."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.tools.stats import percentile, ratio, summary


def test_percentiles_interpolate_between_closest_ranks_like_numpy() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 0) == 15
    assert percentile(values, 50) == 35
    assert percentile(values, 100) == 50
    assert percentile(values, 40) == pytest.approx(29.0)
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)


def test_a_single_value_is_every_percentile() -> None:
    assert summary([0.2]) == {"count": 1, "p50": 0.2, "p95": 0.2, "p99": 0.2, "max": 0.2, "mean": 0.2}


def test_no_values_summarise_to_a_count_of_zero_and_have_no_percentile() -> None:
    assert summary([]) == {"count": 0}
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_within_the_data(values: list[float]) -> None:
    s = summary(values)
    assert min(values) <= s["p50"] <= s["p95"] <= s["p99"] <= s["max"] == max(values)


def test_a_ratio_over_zero_is_none() -> None:
    assert ratio(1, 0) is None
    assert ratio(2060, 10) == 206
