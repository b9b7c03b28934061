"""`python -m bench.tracing_cost`: what tracing costs the drain (the benchmark lives in
`bench.measures.tracing_cost`).
"""

from __future__ import annotations

import sys

from bench.measures.tracing_cost.run import main

if __name__ == "__main__":
    sys.exit(main())
