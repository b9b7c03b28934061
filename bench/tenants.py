"""`python -m bench.tenants`: what 1, 100 and 1,000 tenant lanes cost, idle and draining (the benchmark lives in
`bench.measures.tenants`).
"""

from __future__ import annotations

import sys

from bench.measures.tenants.run import main

if __name__ == "__main__":
    sys.exit(main())
