"""`python -m bench.fairness`: is the drain fair to a small tenant, and does it hold the handler to its limits (the
benchmark lives in `bench.measures.fairness`).
"""

from __future__ import annotations

import sys

from bench.measures.fairness.run import main

if __name__ == "__main__":
    sys.exit(main())
