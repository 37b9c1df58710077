"""Synth benchmark: `python app.py` for an environment against a bare one-stack CDK app (one S3 bucket, the same
cdk.json feature flags), run alternately in one session so that machine noise hits both equally; prints each median
and the median ratio."""

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


def context_json(config: str | None) -> str:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context.update(json.loads((ROOT / "cdk.context.json").read_text()))
    if config is None:
        context.pop("config", None)
    else:
        context["config"] = config
        context["kvtiers:review"] = "true"  # offline: no vendored HyperPod chart here
    return json.dumps(context)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(configs: list[str], runs: int) -> dict[str, list[float]]:
    """Alternate bare, config1, config2, ... ``runs`` times; return seconds per label."""
    times: dict[str, list[float]] = {"bare": [], **{c: [] for c in configs}}
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        base_env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
        for _ in range(runs):
            # Same cdk.json feature flags for both (synth-time template validation is one of them).
            bare_env = {**base_env, "CDK_OUTDIR": f"{tmp}/bare.out", "CDK_CONTEXT_JSON": context_json(None)}
            times["bare"].append(timed([sys.executable, str(bare)], bare_env))
            for config in configs:
                env = {**base_env, "CDK_OUTDIR": f"{tmp}/app.out", "CDK_CONTEXT_JSON": context_json(config)}
                times[config].append(timed([sys.executable, "app.py"], env))
    return times


def endpoints_variant(count: int, folder: Path) -> str:
    """dev.yaml with ``count`` one-replica endpoints on enough nodes (same node count for every variant)."""
    raw = yaml.safe_load((ROOT / "config/dev.yaml").read_text())
    raw["hyperpod"]["instance_groups"][0]["count"] = 10
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs = args.config or ["config/dev.yaml"]
        if args.endpoints:
            one, twenty = endpoints_variant(1, Path(tmp)), endpoints_variant(20, Path(tmp))
            configs = [*configs, one, twenty]
        times = measure(configs, args.runs)
    bare = statistics.median(times["bare"])
    print(f"bare one-stack app: median {bare:.2f} s over {args.runs} runs")
    for config in configs:
        median = statistics.median(times[config])
        ratios = [t / b for t, b in zip(times[config], times["bare"])]
        print(f"{Path(config).name}: median {median:.2f} s, median ratio to bare {statistics.median(ratios):.2f}x")
    if args.endpoints:
        ratios = [t20 / t1 for t1, t20 in zip(times[one], times[twenty])]
        print(f"20 endpoints vs 1 endpoint: median ratio {statistics.median(ratios):.2f}x (budget 1.3x)")


if __name__ == "__main__":
    main()
