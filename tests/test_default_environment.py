"""The default environment (config/dev.yaml), and prod with its operator endpoint, synthesizes as `cdk synth` runs it, on the Node.js the Makefile puts
first on PATH, with no warning about its own settings and no deprecated aws-cdk-lib API (jsii refuses one with
JSII_DEPRECATED=fail)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.synth import ROOT, cdk_context

# Warnings the default environment cannot avoid: the offline synth says it is one; on the review day no Kubernetes
# version HyperPod documents has EKS standard support left (docs/deploying.md, "Kubernetes version"); and its GPU
# group keeps HyperPod's deep health checks, which AWS does not allow together with the taint that would keep other
# workloads off the Curvine nodes (docs/security.md, "What Curvine cannot enforce").
EXPECTED_WARNINGS = {"kvtiers:review-only", "kvtiers:kubernetes-extended-support", "kvtiers:curvine-nodes-open"}
# What synth says about the default environment besides: which endpoints got the L2, and that the source design's
# HyperPod tiered storage (part of the product) is read by no endpoint of it (only operator endpoints with the
# tieredstorage backend read it).
EXPECTED_NOTES = (" L2 on (", "offline review synth", "hyperpod tiered storage reserves 20 %")
# prod (three masters, an operator endpoint) also says that its example S3 weights pin no revision.
PROD_NOTES = (*EXPECTED_NOTES, "L2 on but source.revision is not pinned")


@pytest.mark.parametrize(("config", "expected_notes"), [("dev", EXPECTED_NOTES), ("prod", PROD_NOTES)])
def test_the_default_environment_synthesizes_without_warnings_about_its_settings(tmp_path, config, expected_notes):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps(
                {**cdk_context(), "config": f"config/{config}.yaml", "kvtiers:review": "true"}
            ),
            "CDK_OUTDIR": str(out),
            "JSII_DEPRECATED": "fail",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "deprecated" not in result.stderr.lower(), result.stderr
    assert not re.search(r"Node \d+ is end-of-life", result.stderr), "jsii runs on an unsupported Node.js"
    notes = [line for line in result.stderr.splitlines() if line.startswith("kvtiers: ")]
    assert all(any(expected in line for expected in expected_notes) for line in notes), notes
    warnings = set()
    for metadata in out.glob("*.metadata.json"):
        for entries in json.loads(metadata.read_text()).values():
            for entry in entries:
                if entry["type"] == "aws:cdk:warning":
                    warnings.add(entry["data"])
    unexpected = {w for w in warnings if not any(f"[ack: {tag}]" in w for tag in EXPECTED_WARNINGS)}
    assert not unexpected, unexpected
