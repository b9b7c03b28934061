"""`python -m bench.idle_sources`: an idle app's transactions by source (the benchmark lives in
`bench.measures.idle_sources`).
"""

from __future__ import annotations

import sys

from bench.measures.idle_sources.run import main

if __name__ == "__main__":
    sys.exit(main())
