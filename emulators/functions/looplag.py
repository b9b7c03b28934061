"""A watch on the host's own event loop: how long it was kept from running, and a warning when too long.

Not something the real host does (its worker runs the app in a separate process); the local host runs the
app in its own loop, so a function that blocks the loop stalls every request and drain here. The watch
sleeps `every_s` at a time and measures how late it wakes: lateness past `warn_ms` is logged as a warning
with the figure, so a blocking function shows up in host.log with how long it held the loop.
`LOCAL_HOST_LOOP_WARN_MS` sets the threshold (config.loop_warn_ms: default 100 ms, the app's own promise;
0 turns the watch off).
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("Host.EventLoop")


async def watch_loop(stopping: asyncio.Event, threshold_ms: int, every_s: float = 0.02) -> None:
    """Until `stopping` is set: log each time the loop woke this watch more than `threshold_ms` late."""
    if threshold_ms <= 0:
        return
    while not stopping.is_set():
        started = time.monotonic()
        await asyncio.sleep(every_s)
        late_ms = (time.monotonic() - started - every_s) * 1000
        if late_ms > threshold_ms:
            log.warning("The event loop was blocked for %d ms (more than %d ms)", late_ms, threshold_ms)
