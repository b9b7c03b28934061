"""The steady drain window the message rate is measured over."""

from __future__ import annotations

import pytest

from bench.tools.window import steady_window


def test_the_window_runs_from_the_first_receive_to_the_last_delete_ignoring_set_up_and_tear_down() -> None:
    stamps = [
        (0.00, "queue.CreateQueue"),
        (0.02, "blob.LeaseBlob.Acquire"),
        (0.05, "queue.GetMessages"),
        (0.30, "blob.PutBlob"),
        (0.31, "queue.DeleteMessage"),
        (0.40, "queue.GetMessages"),
        (0.90, "queue.DeleteMessage"),
        (0.95, "queue.GetMessages"),  # the empty receive that ends it
        (1.60, "blob.LeaseBlob.Release"),
    ]
    window = steady_window(stamps)
    assert window is not None
    assert (window.first_receive_s, window.last_delete_s) == (0.05, 0.90)
    assert window.seconds == pytest.approx(0.85)


def test_a_drain_that_deleted_nothing_has_no_window() -> None:
    assert steady_window([(0.0, "queue.GetMessages"), (0.1, "queue.PeekMessages")]) is None
    assert steady_window([(0.5, "queue.DeleteMessage"), (0.6, "queue.GetMessages")]) is None
    assert steady_window([]) is None
