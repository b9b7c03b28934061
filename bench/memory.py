"""This process's peak resident set size.

`/proc/self/status` VmHWM belongs to the current address space, which `exec` replaces; `ru_maxrss` would
carry over the parent's peak from before the fork, so a small child would report its parent's size.
"""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
