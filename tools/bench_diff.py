"""`kvtiers diff` benchmark: the diff of both example environments (base HEAD against the working tree: two synths
of each, two at a time, and the model) against one synth of each environment (`python app.py`, the same synth the
diff runs), alternating in one session so that machine noise hits both; prints each median and the median ratios of
the diff to one synth of each environment and to one synth (the dev environment's)."""

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
from kvtiers.cli.synth_env import head_env

CONFIGS = (Path("config/dev.yaml"), Path("config/prod.yaml"))


def one_synth_each(folder: Path) -> list[float]:
    """The time of each environment's synth, in :data:`CONFIGS` order."""
    times = []
    for config in CONFIGS:
        start = time.perf_counter()
        synth(ROOT, config, folder / config.stem, head_env(ROOT))
        times.append(time.perf_counter() - start)
    return times


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
    firsts, synths, diffs, ratios, single_ratios = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            each = one_synth_each(Path(tmp) / f"run{run}")
            firsts.append(each[0])
            synths.append(sum(each))
            diffs.append(kvtiers_diff())
            ratios.append(diffs[-1] / synths[-1])
            single_ratios.append(diffs[-1] / firsts[-1])
            print(
                f"run {run + 1}: synth {' + '.join(f'{c.stem} {t:.1f} s' for c, t in zip(CONFIGS, each))}, "
                f"kvtiers diff {diffs[-1]:.1f} s: {ratios[-1]:.2f}x one synth of each, "
                f"{single_ratios[-1]:.2f}x one synth ({CONFIGS[0].stem})"
            )
    print(
        f"median: one synth of each {statistics.median(synths):.1f} s, one synth ({CONFIGS[0].stem}) "
        f"{statistics.median(firsts):.1f} s, kvtiers diff {statistics.median(diffs):.1f} s; ratio "
        f"{statistics.median(ratios):.2f}x one synth of each, {statistics.median(single_ratios):.2f}x one synth"
    )


if __name__ == "__main__":
    main()
