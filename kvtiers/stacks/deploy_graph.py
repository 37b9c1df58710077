"""The whole deploy graph of one environment: network -> platform -> workloads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from kvtiers.config.schema import Environment
from kvtiers.stacks.nag import acknowledge_platform_findings, acknowledge_workload_findings
from kvtiers.stacks.network_stack import NetworkStack
from kvtiers.stacks.platform_stack import PlatformStack
from kvtiers.stacks.workloads_stack import WorkloadsStack


@dataclass(frozen=True)
class DeployGraph:
    network: NetworkStack
    platform: PlatformStack
    workloads: WorkloadsStack

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        return (self.network, self.platform, self.workloads)


def build_deploy_graph(
    app: cdk.App, environment: Environment, *, hyperpod_chart_dir: Path | None = None, nag: bool = True
) -> DeployGraph:
    """Add the environment's stacks to ``app``. With ``nag``, cdk-nag AwsSolutions checks run at synth."""
    env = environment
    aws_env = cdk.Environment(account=env.account, region=env.region)
    tags = {"kvtiers:environment": env.name, **env.tags}
    network = NetworkStack(app, f"{env.name}-network", environment=env, env=aws_env, tags=tags)
    platform = PlatformStack(
        app,
        f"{env.name}-platform",
        environment=env,
        network=network.network,
        hyperpod_chart_dir=hyperpod_chart_dir,
        env=aws_env,
        tags=tags,
    )
    workloads = WorkloadsStack(app, f"{env.name}-workloads", environment=env, platform=platform, env=aws_env, tags=tags)
    graph = DeployGraph(network=network, platform=platform, workloads=workloads)
    acknowledge_platform_findings(graph)
    acknowledge_workload_findings(graph)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return graph


def synthesize(app: cdk.App, graph: DeployGraph) -> Path:
    """Synthesize the cloud assembly and the per-object Kubernetes YAML beside it; returns the assembly folder."""
    from kvtiers.stacks.k8s_yaml import write_k8s_yaml

    outdir = Path(app.synth().directory)
    write_k8s_yaml([graph.workloads], outdir)
    return outdir
