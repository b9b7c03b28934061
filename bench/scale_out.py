"""`python -m bench.scale_out`: one and two local hosts draining one backlog (the benchmark lives in
`bench.measures.scale_out`).
"""

from __future__ import annotations

import sys

from bench.measures.scale_out.run import main

if __name__ == "__main__":
    sys.exit(main())
