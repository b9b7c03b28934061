"""How a measured figure grows with the batch's size (pure): the log-log slope between two sizes, its name,
and an extension to a size not measured, by that slope.

A slope under 0.15 is `constant`, 0.85-1.15 `linear`; anything else is named by its exponent. The slope that
extends a curve is the one between its two largest measured sizes (where fixed costs weigh least).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CONSTANT_BELOW = 0.15
LINEAR_WITHIN = (0.85, 1.15)


def slope(x0: float, y0: float, x1: float, y1: float) -> float | None:
    """d log y / d log x between two points; None where a value is not positive."""
    if min(x0, y0, x1, y1) <= 0 or x0 == x1:
        return None
    return math.log(y1 / y0) / math.log(x1 / x0)


def last_slope(points: Sequence[tuple[float, float | None]]) -> float | None:
    """The slope between the two largest sizes with a value."""
    found = sorted((x, y) for x, y in points if y is not None)
    if len(found) < 2:
        return None
    (x0, y0), (x1, y1) = found[-2], found[-1]
    return slope(x0, y0, x1, y1)


def named(s: float | None) -> str:
    if s is None:
        return "-"
    if abs(s) < CONSTANT_BELOW:
        return "constant"
    if LINEAR_WITHIN[0] <= s <= LINEAR_WITHIN[1]:
        return "linear"
    return f"~n^{s:.2f}"


def extended(points: Sequence[tuple[float, float | None]], to: float) -> float | None:
    """The value at size `to`, from the largest measured size by the last slope (a constant curve stays)."""
    found = sorted((x, y) for x, y in points if y is not None)
    s = last_slope(points)
    if not found or s is None:
        return None
    x1, y1 = found[-1]
    if abs(s) < CONSTANT_BELOW:
        return y1
    return y1 * (to / x1) ** s
