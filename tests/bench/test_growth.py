"""The curves' growth names and their extension to 10^7 items, worked by hand."""

from __future__ import annotations

import pytest

from bench.tools.growth import extended, last_slope, named, slope


def test_slope_of_a_linear_curve_is_one() -> None:
    assert slope(1_000, 2.0, 10_000, 20.0) == pytest.approx(1.0)


def test_slope_of_a_flat_curve_is_zero_and_of_a_missing_value_none() -> None:
    assert slope(1_000, 5.0, 1_000_000, 5.0) == pytest.approx(0.0)
    assert slope(1_000, 0.0, 10_000, 3.0) is None


def test_names() -> None:
    assert named(0.05) == "constant"
    assert named(-0.1) == "constant"
    assert named(0.97) == "linear"
    assert named(0.5) == "~n^0.50"
    assert named(None) == "-"


def test_last_slope_uses_the_two_largest_sizes() -> None:
    # 10^3 -> 10^4 grows 10x (slope 1), 10^4 -> 10^5 grows 100x (slope 2): the extension uses 2
    points = [(100_000, 400.0), (1_000, 0.4), (10_000, 4.0)]
    assert last_slope(points) == pytest.approx(2.0)


def test_extension_by_the_last_slope() -> None:
    # linear: 12 s at 10^6 is 120 s at 10^7
    assert extended([(100_000, 1.2), (1_000_000, 12.0)], 10_000_000) == pytest.approx(120.0)
    # constant: the last value stays
    assert extended([(100_000, 8.1), (1_000_000, 8.2)], 10_000_000) == 8.2
    # slope 0.5: sqrt(10) times
    assert extended([(100, 1.0), (10_000, 10.0)], 1_000_000) == pytest.approx(100.0)
    assert extended([(1_000, None), (10_000, 3.0)], 100_000) is None
