"""`python -m sim.mutants`: the revert table (`sim.mutants.runner`)."""

from __future__ import annotations

import sys

from sim.mutants.runner import main

if __name__ == "__main__":
    sys.exit(main())
