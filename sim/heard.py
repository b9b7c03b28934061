"""A logger of the app heard for one run: the checks that read the app's own warnings or errors (`sim.lapses`,
`sim.checks.promises.incidents_watched`) add their handler here, and a quiet run (`python -m sim`) hears them
without showing them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def heard(name: str, level: int, handler: logging.Handler) -> Iterator[None]:
    """`handler` hears logger `name` at `level` and above for the `with` block; the logger is as it was after."""
    log = logging.getLogger(name)
    was_level, propagate = log.level, log.propagate
    if not log.isEnabledFor(level):  # a quiet run: heard here, shown nowhere
        log.setLevel(level)
        log.propagate = False
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(was_level)
        log.propagate = propagate
