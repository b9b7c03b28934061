"""`python -m bench.platform`: the platform model of Flex Consumption draining one backlog (the benchmark lives in
`bench.measures.platform`).
"""

from __future__ import annotations

import sys

from bench.measures.platform.run import main

if __name__ == "__main__":
    sys.exit(main())
