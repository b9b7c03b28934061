"""The simulation's tests: the app's own log records stay quiet (a seed's schedule is printed on failure)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def quiet_app_logs() -> Iterator[None]:
    app = logging.getLogger("shared")
    level = app.level
    app.setLevel(logging.CRITICAL)
    yield
    app.setLevel(level)
