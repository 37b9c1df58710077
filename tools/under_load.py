"""Run a command while every core spins in a busy loop: the suite must pass on a loaded machine, so its tests wait
for events, not for short deadlines (tests/waiting.py).

    python tools/under_load.py [--hogs N] -- COMMAND [ARG ...]

Exits with the command's exit status; the hogs (one process per core by default, at the same priority as the
command) stop with it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time


def spin() -> None:
    while True:
        pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="under_load.py", description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    started = time.monotonic()
    try:
        status = subprocess.call(command)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"under_load: {' '.join(command)} exited {status} after {time.monotonic() - started:.0f} s beside "
          f"{args.hogs} busy process(es)", file=sys.stderr)  # fmt: skip
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
