"""Attributing a profiled drain's time to parts of the per-message work."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.tools.profile_parts import OTHER, PARTS, parts


@dataclass
class F:
    function: str
    time: float
    children: list[Any] = field(default_factory=list)


def test_time_goes_to_the_outermost_matching_part_and_the_rest_to_other() -> None:
    tree = F(
        "run",
        10.0,
        [
            F("_process", 7.0, [F("decode", 2.0, [F("loads", 1.5)]), F("_put", 3.0, [F("_delete", 9.9)])]),
            F("_receive", 1.0),
            F("_delete", 0.5),
        ],
    )
    got = parts(tree)
    assert got[PARTS["decode"]] == 2.0
    assert got[PARTS["_put"]] == 3.0  # the nested _delete is inside it, not counted again
    assert got[PARTS["_delete"]] == 0.5
    assert got[PARTS["_receive"]] == 1.0
    assert got[OTHER] == pytest.approx(3.5)
    assert list(got) == sorted(got, key=lambda k: -got[k])


def test_building_the_result_document_belongs_to_the_group_write_that_does_it() -> None:
    tree = F("run", 2.0, [F("settle", 0.5), F("_put", 0.75, [F("to_json", 0.25), F("settle", 0.1)])])
    got = parts(tree)
    assert got[PARTS["settle"]] == 0.5
    assert got[PARTS["_put"]] == 0.75
