#!/usr/bin/env python3
"""CDK entry point. The only module that reads the environment: the CDK context key ``config`` picks the
environment file (default ``config/dev.yaml``) and the ``vendor/`` folder supplies the HyperPod chart if fetched."""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

from kvtiers.config import ConfigError, load_environment
from kvtiers.config.report import tiered_storage_report
from kvtiers.k8s_charts.serving import l2_report
from kvtiers.stacks.deploy_graph import build_deploy_graph, synthesize

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = "config/dev.yaml"
HYPERPOD_CHART_DIR = ROOT / "vendor" / "sagemaker-hyperpod-cli" / "helm_chart" / "HyperPodHelmChart"


def main() -> None:
    app = cdk.App()
    config_path = Path(app.node.try_get_context("config") or DEFAULT_CONFIG)
    try:
        environment = load_environment(config_path if config_path.is_absolute() else ROOT / config_path)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    graph = build_deploy_graph(app, environment, hyperpod_chart_dir=HYPERPOD_CHART_DIR)
    synthesize(app, graph)
    for line in (*l2_report(environment), *tiered_storage_report(environment)):
        print(f"kvtiers: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
