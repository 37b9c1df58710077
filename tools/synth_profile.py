"""Where a synth's time goes: runs ``app.py`` for an environment in this process (offline review synth, the same
context as ``tools/bench_synth.py``) and prints the jsii round trips by API (a count does not change with the
machine's load), the wall time spent waiting on each, and optionally the Python profile (``--cprofile N``: the N
functions of most cumulative time). The Node.js side is profiled with ``NODE_OPTIONS='--cpu-prof
--cpu-prof-dir=DIR'`` (read the largest ``.cpuprofile`` with Chrome's DevTools).

    .venv/bin/python tools/synth_profile.py [--config config/prod.yaml] [--top 30] [--cprofile 40]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import runpy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_synth import ROOT, context_json


def api(request: Any) -> str:
    """``CreateRequest aws-cdk-lib.aws_ec2.Vpc``, ``GetRequest stackName on aws-cdk-lib.Stack``, ..."""
    name = type(request).__name__
    for field in ("fqn", "method", "property"):
        value = getattr(request, field, None)
        if value:
            name += f" {value}"
    objref = getattr(request, "objref", None)
    if objref is not None:
        name += " on " + str(objref.ref).split("@")[0]
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/dev.yaml")
    parser.add_argument("--top", type=int, default=25, help="APIs to list")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N", help="also print the Python profile")
    args = parser.parse_args()
    os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["CDK_OUTDIR"] = tempfile.mkdtemp(prefix="synth-profile-")
    os.environ["CDK_CONTEXT_JSON"] = context_json(str((ROOT / args.config).resolve()))

    from jsii._kernel.providers import process

    counts: collections.Counter[str] = collections.Counter()
    waited: collections.defaultdict[str, float] = collections.defaultdict(float)
    send = process._NodeProcess.send

    def counting_send(self: Any, request: Any, response_type: Any) -> Any:
        start = time.perf_counter()
        try:
            return send(self, request, response_type)
        finally:
            counts[api(request)] += 1
            waited[api(request)] += time.perf_counter() - start

    process._NodeProcess.send = counting_send  # type: ignore[method-assign]
    profile = cProfile.Profile() if args.cprofile else None
    os.chdir(ROOT)
    sys.argv = ["app.py"]
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    try:
        runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    finally:
        if profile is not None:
            profile.disable()
        total = time.perf_counter() - start
        # "_CompleteRequest": the answer to a callback (an aspect's visit, a validation); the last one of a synth
        # carries the synth's own result, so its wait is the synth's.
        print(
            f"\n{sum(counts.values())} jsii round trips, {sum(waited.values()):.2f} s of {total:.2f} s waiting on them"
        )
        for name, count in counts.most_common(args.top):
            print(f"{count:6d} {waited[name]:7.3f} s  {name}")
        if profile is not None:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.cprofile)


if __name__ == "__main__":
    main()
