"""CPU-bound processes beside a benchmark, started and stopped by it, so that a loaded machine is reproducible."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from devstack.spin import SPIN


@contextmanager
def spinning(count: int) -> Iterator[list[int]]:
    """`count` processes that each spin a core while the block runs; their pids; stopped by those pids after."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield [p.pid for p in spinners]
    finally:
        for spinner in spinners:
            spinner.terminate()
        for spinner in spinners:
            spinner.wait()
