"""Synth benchmark: `python app.py` for an environment against a bare one-stack CDK app (one S3 bucket, the same
cdk.json feature flags), run alternately in one session so that machine noise hits both equally; prints each median
and the median ratio.

``--baseline-rev REV`` also times another git revision of the app in the same session: REV is checked out into a
temporary git worktree, and each run times this tree and then REV, with the same Python and the same environment
files (this tree's), so the ratio says how much slower or faster this tree synthesizes than REV."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BARE_APP = """
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App()
stack = cdk.Stack(app, "Bare", env=cdk.Environment(account="111111111111", region="us-east-1"))
s3.Bucket(stack, "Bucket")
app.synth()
"""


def context_json(config: str | None, tree: Path = ROOT) -> str:
    context = json.loads((tree / "cdk.json").read_text())["context"]
    context.update(json.loads((tree / "cdk.context.json").read_text()))
    if config is None:
        context.pop("config", None)
    else:
        context["config"] = config
        context["kvtiers:review"] = "true"  # offline: no vendored HyperPod chart here
    return json.dumps(context)


def timed(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(configs: list[str], runs: int, baseline: Path | None = None) -> dict[tuple[str, str], list[float]]:
    """Alternate bare, config1 (then config1 in ``baseline``), config2, ... ``runs`` times; return seconds per
    (tree, config), tree being ``"this"`` or ``"baseline"`` (and ``("this", "bare")`` for the bare app)."""
    trees = {"this": ROOT, **({"baseline": baseline} if baseline else {})}
    times: dict[tuple[str, str], list[float]] = {("this", "bare"): []}
    times.update({(tree, config): [] for config in configs for tree in trees})
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        base_env = dict(os.environ)
        for _ in range(runs):
            # Same cdk.json feature flags for both (synth-time template validation is one of them).
            bare_env = {**base_env, "CDK_OUTDIR": f"{tmp}/bare.out", "CDK_CONTEXT_JSON": context_json(None)}
            times["this", "bare"].append(timed([sys.executable, str(bare)], bare_env))
            for config in configs:
                for tree, path in trees.items():
                    # Run from the tree, so that its own kvtiers is imported first (before the editable install's).
                    env = {**base_env, "CDK_OUTDIR": f"{tmp}/app.out", "CDK_CONTEXT_JSON": context_json(config, path)}
                    times[tree, config].append(timed([sys.executable, "app.py"], env, cwd=path))
    return times


def worktree(rev: str, folder: Path) -> Path:
    """``rev`` checked out (detached) into a new git worktree under ``folder``."""
    path = folder / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(path), rev], check=True)
    return path


def endpoints_variant(count: int, folder: Path) -> str:
    """dev.yaml with ``count`` one-replica endpoints on enough nodes (same node count for every variant). Without
    HyperPod tiered storage: the placement check assumes the scheduler may stack one engine per GPU on a node, and
    four of dev's engines fit a node only with that 20 % of its memory given back to the pods."""
    raw = yaml.safe_load((ROOT / "config/dev.yaml").read_text())
    raw["hyperpod"]["instance_groups"][0]["count"] = 10
    raw["hyperpod"]["tiered_storage"] = {"enabled": False}
    template = raw["serving"]["endpoints"][0]
    raw["serving"]["endpoints"] = [{**template, "name": f"endpoint-{i:02d}", "replicas": 1} for i in range(count)]
    path = folder / f"dev-{count}-endpoints.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--config", action="append", help="environment file(s); default config/dev.yaml")
    parser.add_argument("--endpoints", action="store_true", help="also compare 1 against 20 endpoints")
    parser.add_argument(
        "--baseline-rev", metavar="REV", help="also time git revision REV (a temporary worktree) in the same runs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # Absolute paths: the baseline tree reads the same files as this one.
        configs = [str((ROOT / c).resolve()) for c in args.config or ["config/dev.yaml"]]
        if args.endpoints:
            one, twenty = endpoints_variant(1, Path(tmp)), endpoints_variant(20, Path(tmp))
            configs = [*configs, one, twenty]
        baseline = worktree(args.baseline_rev, Path(tmp)) if args.baseline_rev else None
        try:
            times = measure(configs, args.runs, baseline)
        finally:
            if baseline is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=True)
    bare_times = times["this", "bare"]
    print(f"bare one-stack app: median {statistics.median(bare_times):.2f} s over {args.runs} runs")
    for config in configs:
        this = times["this", config]
        ratios = [t / b for t, b in zip(this, bare_times)]
        print(
            f"{Path(config).name}: median {statistics.median(this):.2f} s, median ratio to bare "
            f"{statistics.median(ratios):.2f}x"
        )
        if baseline is not None:
            base = times["baseline", config]
            ratio = statistics.median(t / b for t, b in zip(this, base))
            base_ratio = statistics.median(t / b for t, b in zip(base, bare_times))
            print(
                f"{Path(config).name} at {args.baseline_rev}: median {statistics.median(base):.2f} s, median ratio to "
                f"bare {base_ratio:.2f}x; this tree / {args.baseline_rev}: median ratio {ratio:.3f} "
                f"({(ratio - 1) * 100:+.1f} %)"
            )
    if args.endpoints:
        ratios = [t20 / t1 for t1, t20 in zip(times["this", one], times["this", twenty])]
        print(f"20 endpoints vs 1 endpoint: median ratio {statistics.median(ratios):.2f}x (budget 1.3x)")


if __name__ == "__main__":
    main()
