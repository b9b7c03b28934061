"""Summarising py-spy's collapsed stacks, worked by hand."""

from __future__ import annotations

from bench.tools.spy_summary import parse, summary


def test_idle_and_areas() -> None:
    raw = [
        "main (a.py:1);run_forever (asyncio/base_events.py:607);EpollSelector.select (selectors.py:468) 60",
        "main (a.py:1);receive (shared/engine/receiving.py:10);run (core/pipeline/_base_async.py:229) 30",
        "main (a.py:1);settle (shared/engine/settling.py:3);loads (shared/core/fastjson.py:9) 10",
        "not a line",
    ]
    found = summary(parse(raw))
    assert found["samples"] == 100
    assert found["idle_share"] == 0.6
    assert found["busy_samples"] == 40
    shares = found["areas_share_of_busy"]
    assert shares["receive (shared/engine/receiving.py)"] == 0.75
    assert shares["Azure SDK (azure.core, azure.storage)"] == 0.75
    assert shares["settle (shared/engine/settling.py)"] == 0.25
    assert shares["JSON (shared/core/fastjson.py, json)"] == 0.25
    assert shares["the handler (bench/handlers.py)"] == 0.0
