"""`python -m bench.rounds`: the app, peer (a') and the raw loop in interleaved rounds, with CPU per message (the
benchmark lives in `bench.measures.rounds`)."""

from __future__ import annotations

import sys

from bench.measures.rounds.run import main

if __name__ == "__main__":
    sys.exit(main())
