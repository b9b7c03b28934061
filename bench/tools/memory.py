"""This process's peak resident set size, and its CPU time.

`/proc/self/status` VmHWM belongs to the current address space, which `exec` replaces; `ru_maxrss` would
carry over the parent's peak from before the fork, so a small child would report its parent's size.
"""

from __future__ import annotations

import os
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


def rss_mb() -> float:
    """This process's resident set size now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak() -> bool:
    """Set VmHWM back to the current RSS (`/proc/self/clear_refs` 5, Linux 4.0+), so the next `peak_rss_mb`
    is the peak of what follows; False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cpu_seconds() -> float:
    """This process's CPU time so far, user and system (its children's not included)."""
    t = os.times()
    return t.user + t.system
