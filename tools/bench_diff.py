"""`kvtiers diff` benchmark: the diff of both example environments (base HEAD against the working tree: two synths
of each, two at a time, and the model) against one synth of each environment (`python app.py`, the same synth the
diff runs), alternating in one session so that machine noise hits both; prints each median and the median ratio."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this tree's kvtiers, not an editable install's

from kvtiers.cli.diff import synth

CONFIGS = (Path("config/dev.yaml"), Path("config/prod.yaml"))


def one_synth_each(folder: Path) -> float:
    start = time.perf_counter()
    for config in CONFIGS:
        synth(ROOT, config, folder / config.stem)
    return time.perf_counter() - start


def kvtiers_diff() -> float:
    configs = [arg for config in CONFIGS for arg in ("-c", str(config))]
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "kvtiers.cli.main", "diff", "--base", "HEAD", *configs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):  # 1: the diff found errors, still a measurement
        raise SystemExit(result.stderr[-2000:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    synths, diffs, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            synths.append(one_synth_each(Path(tmp) / f"run{run}"))
            diffs.append(kvtiers_diff())
            ratios.append(diffs[-1] / synths[-1])
            print(f"run {run + 1}: one synth of each environment {synths[-1]:.1f} s, kvtiers diff {diffs[-1]:.1f} s")
    print(
        f"median: one synth of each {statistics.median(synths):.1f} s, kvtiers diff {statistics.median(diffs):.1f} s, "
        f"ratio {statistics.median(ratios):.2f}x"
    )


if __name__ == "__main__":
    main()
