"""`python -m bench.curves`: cost and time against the batch's size (the benchmark lives in `bench.measures.curves`)."""

from __future__ import annotations

import sys

from bench.measures.curves.run import main

if __name__ == "__main__":
    sys.exit(main())
