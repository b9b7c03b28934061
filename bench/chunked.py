"""`python -m bench.chunked`: peer (a'), the built-in trigger fed the app's chunks, beside (a) and the app (the
benchmark lives in `bench.measures.chunked`).
"""

from __future__ import annotations

import sys

from bench.measures.chunked.run import main

if __name__ == "__main__":
    sys.exit(main())
