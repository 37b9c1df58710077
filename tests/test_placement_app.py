"""The shipped environments place every pod with room to spare, and an environment file that breaks exactly one
resource of one group is refused by the app with one line naming it, no traceback, nothing synthesized."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml

from kvtiers.config import load_environment
from kvtiers.stacks.deploy_graph import build_deploy_graph
from tests.conftest import CONFIG_DIR
from tests.synth import ROOT, cdk_context

MARGIN = 0.10
"""What the examples leave free of CPU, memory and pods on every group's fullest node, at least."""


@pytest.mark.parametrize("synthesized", ["dev_synth", "prod_synth"])
def test_both_examples_fit_every_node_with_a_margin(synthesized, request):
    placement = request.getfixturevalue(synthesized).graph.placement
    assert placement.problems() == []
    for offer in placement.offers:
        for fullest in placement.use(offer.group).fullest:
            if fullest.resource.label in ("cpu", "memory", "pods"):
                assert fullest.asked <= (1 - MARGIN) * fullest.offered, (offer.group, fullest)


def environment_file(tmp_path: Path, base: str, change) -> Path:
    raw = yaml.safe_load((CONFIG_DIR / f"{base}.yaml").read_text())
    raw = copy.deepcopy(raw)
    change(raw)
    path = tmp_path / f"{base}-changed.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def group(raw: dict, name: str) -> dict:
    return next(g for g in raw["hyperpod"]["instance_groups"] if g["name"] == name)


def endpoint(raw: dict, name: str) -> dict:
    return next(e for e in raw["serving"]["endpoints"] if e["name"] == name)


CHANGES = {
    # The default before this model: SMT off halves g6e-mid's CPUs, and the 32B engines no longer fit beside Curvine.
    "cpu": ("prod", lambda raw: group(raw, "g6e-mid").update(threads_per_core=1), "'g6e-mid'", "cpu"),
    "memory": ("dev", lambda raw: endpoint(raw, "qwen2-7b").update(l1_gib=150), "'g6e-serving'", "memory"),
    "gpus": ("dev", lambda raw: endpoint(raw, "qwen2-7b").update(tensor_parallel_size=8), "'g6e-serving'", "gpus"),
    "nvme": ("dev", lambda raw: raw["curvine"]["worker"].update(capacity_gb=3790), "'g6e-serving'", "NVMe"),
    "disk": ("dev", lambda raw: group(raw, "g6e-serving").update(ebs_volume_gb=60), "'g6e-serving'", "kubelet disk"),
    # Scaling the worker group below the Curvine masters is refused by CurvineL2 itself (tests/test_rules_in_constructs.py).
}


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_a_file_that_breaks_one_resource_is_refused_with_one_line(tmp_path, case):
    base, change, where, what = CHANGES[case]
    path = environment_file(tmp_path, base, change)
    graph = build_deploy_graph(cdk.App(), load_environment(path), review=True, nag=False)
    problems = graph.placement_problems()
    assert len(problems) == 1, problems
    assert where in problems[0] and what in problems[0], problems


def test_the_app_prints_the_problems_and_synthesizes_nothing(tmp_path):
    path = environment_file(tmp_path, "prod", CHANGES["cpu"][1])
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({**cdk_context(), "config": str(path), "kvtiers:review": "true"}),
            "CDK_OUTDIR": str(out),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith(("b'", "!!"))]
    assert lines[0] == f"error: {path}: pods that do not fit their nodes (1 problem(s))", lines
    assert lines[1].startswith("  instance group 'g6e-mid' (3 x ml.g6e.12xlarge, threads_per_core 1): cpu: ")
    assert "but offers 23.87 CPU" in lines[1]
    assert not list(out.glob("*.template.json"))
