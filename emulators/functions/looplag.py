"""A watch on the host's own event loop: how long it was kept from running, and a warning when too long.

Not something the real host does (its worker runs the app in a separate process); the local host runs the
app in its own loop, so a function that blocks the loop stalls every request and drain here. The watch
sleeps `every_s` at a time and measures how late it wakes: lateness past `warn_ms` is logged as a warning
with the figure, so a blocking function shows up in host.log with how long it held the loop. The warning also
says how much of that time the loop's own thread spent running (its CPU time). Work done on the loop (a parse,
a decompression) runs for nearly all of the delay; a blocking call on it (a sleep, synchronous I/O) does not,
and neither does a loop kept waiting by the machine (other processes on a shared core) or by another thread's
turn with the interpreter lock. So the first figure says the loop was held; the second says whether it was
held by computing on it.
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
        started, ran_from = time.monotonic(), time.thread_time()
        await asyncio.sleep(every_s)
        late_ms = (time.monotonic() - started - every_s) * 1000
        if late_ms > threshold_ms:
            ran_ms = (time.thread_time() - ran_from) * 1000
            log.warning(
                "The event loop was blocked for %d ms (more than %d ms); its thread ran for %d ms of it",
                late_ms,
                threshold_ms,
                ran_ms,
            )
