"""`python -m devstack.spin N -- COMMAND...`: run COMMAND with N CPU-bound processes beside it.

The suite must pass on a busy machine, not only a quiet one (every test waits for events, not durations):
`python -m devstack.spin 2 -- make test` runs it with two processes that spin a core each for as long as it
runs, then stops them by their own pids, whatever the command's outcome, and exits with the command's code.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

SPIN = "while True: pass"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack.spin", description=__doc__.split("\n\n")[0])
    parser.add_argument("spinners", type=int, help="CPU-bound processes to run beside the command (1-64)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("name the command to run after --")
    if not 1 <= args.spinners <= 64:
        parser.error("spinners must be from 1 to 64")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.spinners)]
    try:
        return subprocess.run(args.command, check=False).returncode
    finally:
        for spinner in spinners:
            spinner.terminate()
        for spinner in spinners:
            spinner.wait()


if __name__ == "__main__":
    sys.exit(main())
