"""Splitting a newcomer's latency into Azurite's part and the app's, worked by hand."""

from __future__ import annotations

from bench.tools.azurite_probe import parts


def test_app_part_is_what_the_list_and_receive_do_not_explain() -> None:
    latency = {"B0": 100.0, "B1": 300.0, "B2": 50.0}
    samples = {
        "B0": {"put": 5.0, "list": 20.0, "get": 30.0},  # app: 100 - 50 = 50
        "B1": {"put": 5.0, "list": 100.0, "get": 150.0},  # app: 300 - 250 = 50
        "B2": {"put": 5.0, "list": 40.0, "get": 30.0},  # azurite's part exceeds B's own wait: app 0, not -20
        "B9": {"put": 1.0, "list": 1.0, "get": 1.0},  # no latency for it (B9 never seen): left out
    }
    found = parts(latency, samples)
    assert found["probes"] == 3
    assert found["app_added_ms"]["p50"] == 50.0
    assert found["app_added_ms"]["max"] == 50.0
    assert found["azurite_path_ms"]["max"] == 250.0
    assert found["azurite_path_ms"]["p50"] == 70.0
    assert found["operations_ms"]["put"]["count"] == 4
