#!/usr/bin/env python3
"""CDK entry point. The only module that reads the environment: the CDK context key ``config`` picks the
environment file (default ``config/dev.yaml``), the clock dates the check of EKS's support for the Kubernetes
version, ``vendor/`` supplies the HyperPod dependency chart if fetched, ``-c kvtiers:review=true`` is an offline
review synth without it (whatever ``vendor/`` holds), and ``-c kvtiers:stage=eks`` is the first stage of a deploy
whose chart is installed by hand (``dependency_chart.source: external``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import aws_cdk as cdk

from kvtiers.config import ConfigError, load_environment
from kvtiers.config.model import l2_report
from kvtiers.config.report import l2_revision_report, tiered_storage_report
from kvtiers.stacks.deploy_graph import build_deploy_graph, synthesize
from kvtiers.stacks.hyperpod_chart import DeployGraphError, vendored_chart

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = "config/dev.yaml"
HYPERPOD_CHECKOUT = ROOT / "vendor" / "sagemaker-hyperpod-cli"


def main() -> None:
    app = cdk.App()
    config_path = Path(app.node.try_get_context("config") or DEFAULT_CONFIG)
    try:
        environment = load_environment(config_path if config_path.is_absolute() else ROOT / config_path)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    review = str(app.node.try_get_context("kvtiers:review")).lower() == "true"
    stage = app.node.try_get_context("kvtiers:stage") or "all"
    try:
        if stage not in ("all", "eks"):
            raise DeployGraphError(
                f"-c kvtiers:stage={stage}: use 'eks' (first stage of an external-chart deploy) or 'all'"
            )
        # A review synth is the same whatever vendor/ holds (kvtiers diff compares two of them); it records the pin.
        chart_dir = (
            None if review else vendored_chart(HYPERPOD_CHECKOUT, environment.hyperpod.dependency_chart.revision)
        )
        graph = build_deploy_graph(
            app,
            environment,
            hyperpod_chart_dir=chart_dir,
            review=review,
            eks_only=stage == "eks",
            # EKS's support dates are UTC days.
            support_date=datetime.now(UTC).date(),
        )
    except (DeployGraphError, ValueError) as error:
        # ValueError: a construct refused its props (the rules live in the constructs; the file parsed).
        print(f"error: {config_path}: {error}", file=sys.stderr)
        sys.exit(1)
    problems = graph.placement_problems()
    if problems:
        print(f"error: {config_path}: pods that do not fit their nodes ({len(problems)} problem(s))", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        sys.exit(1)
    if review:
        print(
            "kvtiers: offline review synth (-c kvtiers:review=true): for reading and CI, not for deploying",
            file=sys.stderr,
        )
    synthesize(app, graph)
    for line in (*l2_report(environment), *l2_revision_report(environment), *tiered_storage_report(environment)):
        print(f"kvtiers: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
