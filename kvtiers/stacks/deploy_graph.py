"""The whole deploy graph of one environment: network -> platform -> workloads."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from kvtiers.catalog.kubernetes import Support, support, support_note
from kvtiers.change.record import EndpointRecord
from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.constructs.endpoint_secrets import EndpointSecretAccess
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.constructs.router_access import RouterAccess
from kvtiers.placement import NodePlacement
from kvtiers.stacks import nag as findings
from kvtiers.stacks.hyperpod_chart import DeployGraphError, plan_hyperpod_chart
from kvtiers.stacks.network_stack import NetworkStack
from kvtiers.stacks.platform_stack import PlatformStack
from kvtiers.stacks.workloads_stack import WorkloadsStack


@dataclass(frozen=True)
class DeployGraph:
    network: NetworkStack
    platform: PlatformStack
    workloads: WorkloadsStack | None
    """``None`` in the first stage of an external-chart deploy."""
    environment: Environment

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        return tuple(s for s in (self.network, self.platform, self.workloads) if s is not None)

    @property
    def placement(self) -> NodePlacement | None:
        """What lands on each HyperPod node (None in the first stage of an external-chart deploy)."""
        return self.platform.hyperpod.placement if self.platform.hyperpod is not None else None

    def placement_problems(self) -> list[str]:
        """The pods that do not fit their nodes, one line each (the HyperPod cluster's synth check says the same)."""
        return self.placement.problems() if self.placement is not None else []


def build_deploy_graph(
    app: cdk.App,
    environment: Environment,
    *,
    hyperpod_chart_dir: Path | None = None,
    review: bool = False,
    eks_only: bool = False,
    nag: bool = True,
    support_date: date | None = None,
) -> DeployGraph:
    """Add the environment's stacks to ``app``. With ``nag``, cdk-nag AwsSolutions checks run at synth.

    ``hyperpod_chart_dir`` is the vendored dependency chart; ``review`` allows an offline synth without it (the
    platform template then refuses to deploy); ``eks_only`` is the first stage of a deploy with
    ``dependency_chart.source: external`` (network and EKS only). ``support_date`` is the day of the deploy: a
    Kubernetes version past EKS extended support on it is refused, one in extended support warned about (``None``:
    no check; only app.py reads the clock). Raises :class:`DeployGraphError`.
    """
    env = environment
    if support_date is not None and support(env.eks.kubernetes_version, support_date) is Support.ENDED:
        raise DeployGraphError(f"eks.kubernetes_version: {support_note(env.eks.kubernetes_version, support_date)}")
    chart = plan_hyperpod_chart(env, hyperpod_chart_dir, review=review)
    if eks_only and env.hyperpod.dependency_chart.source != "external":
        raise DeployGraphError(
            "kvtiers:stage=eks is the first stage of hyperpod.dependency_chart.source: external only"
        )
    aws_env = cdk.Environment(account=env.account, region=env.region)
    tags = {"kvtiers:environment": env.name, **env.tags}
    network = NetworkStack(app, f"{env.name}-network", environment=env, env=aws_env, tags=tags)
    platform = PlatformStack(
        app,
        f"{env.name}-platform",
        environment=env,
        network=network.network,
        hyperpod_chart=chart,
        eks_only=eks_only,
        support_date=support_date,
        env=aws_env,
        tags=tags,
    )
    workloads = None
    if not eks_only:
        workloads = WorkloadsStack(
            app, f"{env.name}-workloads", environment=env, platform=platform, env=aws_env, tags=tags
        )
    graph = DeployGraph(network=network, platform=platform, workloads=workloads, environment=environment)
    acknowledge_findings(graph)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return graph


def acknowledge_findings(graph: DeployGraph) -> None:
    """The project's cdk-nag acknowledgments, on the constructs of ``graph`` that carry the findings."""
    platform = graph.platform
    findings.acknowledge_network(graph.network.network)
    findings.acknowledge_eks(platform.eks)
    if platform.hyperpod_dependencies is not None:
        findings.acknowledge_dependency_chart(platform.eks, platform.hyperpod_dependencies)
    if platform.hyperpod is not None:
        findings.acknowledge_hyperpod(platform.hyperpod)
    if platform.inference_operator is not None:
        findings.acknowledge_inference_operator(platform.inference_operator)
    if graph.workloads is not None:
        findings.acknowledge_ebs_csi_role(graph.workloads.curvine.ebs_csi_role)
        for access in graph.workloads.node.find_all():
            if isinstance(access, ModelReadAccess):
                findings.acknowledge_model_access(access)
            elif isinstance(access, RouterAccess):
                findings.acknowledge_router_access(access)
            elif isinstance(access, EndpointSecretAccess):
                findings.acknowledge_endpoint_secrets(access)


def synthesize(app: cdk.App, graph: DeployGraph) -> Path:
    """Synthesize the cloud assembly, the per-object Kubernetes YAML and the records ``kvtiers diff`` reads beside
    it (endpoints, placement, the intended deletions, the dependency chart's pin); returns the assembly folder."""
    from kvtiers.change.deletions import IntendedDeletion, write_intended_deletions
    from kvtiers.change.dependency_chart import ChartRecord, write_chart_record
    from kvtiers.change.record import GroupRecord, PlacedRecord, write_endpoint_record, write_placement_record
    from kvtiers.config.model import l2_mount, l2_namespace
    from kvtiers.constructs.hyperpod_dependencies import CHART_REPOSITORY, NAMESPACE, RELEASE
    from kvtiers.stacks.k8s_yaml import write_k8s_yaml

    outdir = Path(app.synth().directory)
    write_k8s_yaml([s for s in (graph.workloads,) if s is not None], outdir)
    env = graph.environment
    l2 = {s.name: s.l2_enabled for s in model.sizing(env).endpoints}
    # The mount the wiring hands to the serving chart (``l2_mount``), so the record is what the pods mount.
    mounts = {e.name: l2_mount(env, e) for e in env.serving.endpoints}
    namespaces = {e.name: l2_namespace(env, e) for e in env.serving.endpoints}
    write_endpoint_record(
        outdir,
        environment=env.name,
        endpoints={
            e.name: EndpointRecord(
                serving=e.serving,
                engine_image=env.serving.images.vllm_image,
                l2=l2[e.name],
                l2_directory=namespaces[e.name].directory,
                l2_namespace=asdict(namespaces[e.name]),
                l2_location=f"{mounts[e.name].claim_name}/{mounts[e.name].sub_path}",
            )
            for e in env.serving.endpoints
        },
    )
    write_intended_deletions(outdir, [IntendedDeletion(d.target, d.reason) for d in env.intended_deletions])
    # Recorded even when the chart is not in the templates (a review synth): its pin is what a deploy installs.
    chart = env.hyperpod.dependency_chart
    write_chart_record(
        outdir,
        ChartRecord(
            source=chart.source, revision=chart.revision, repository=CHART_REPOSITORY, release=f"{NAMESPACE}/{RELEASE}"
        ),
    )
    placement = graph.placement
    if placement is not None:
        write_placement_record(
            outdir,
            {
                offer.group: GroupRecord(
                    instance_type=offer.instance_type,
                    count=offer.count,
                    threads_per_core=offer.threads_per_core,
                    fullest={
                        f.resource.label: f"{f.resource.format(f.asked)} of {f.resource.format(f.offered)}"
                        for f in placement.use(offer.group).fullest
                    },
                    workloads=[w.name for w in placement.on_group(offer.group)],
                    gpus_per_node=offer.capacity.gpus,
                    placed=[
                        PlacedRecord(
                            name=w.name,
                            groups=list(w.groups),
                            spread=w.spread,
                            replicas=w.replicas,
                            gpus=w.pod.gpus,
                            spread_evenly=w.spread_evenly,
                            engines_of=w.engines_of,
                        )
                        for w in placement.on_group(offer.group)
                    ],
                )
                for offer in placement.offers
            },
        )
    return outdir
