"""One self-managed endpoint (vLLM + LMCache engines and the production-stack router) as a CDK construct: its chart
as one EKS manifest, after the L2 claim it mounts, with the node traffic its router and engines need, checked against
the HyperPod group it runs on and tolerating that group's taints."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster, as_cluster_interface
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, InstanceGroup
from kvtiers.constructs.node_traffic import NodeTraffic, PortRule
from kvtiers.instance_types import (
    G6E_INSTANCE_TYPES,
    check_instance_group,
    check_pod_memory,
    check_tensor_parallel_size,
    tiered_storage_gib,
)
from kvtiers.k8s_charts.names import (
    ENGINE_PORT,
    LMCACHE_CONTROLLER_PULL_PORT,
    LMCACHE_CONTROLLER_REPLY_PORT,
    LMCACHE_WORKER_PORT_BASE,
)
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router, ServingChart
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.platform_defaults import TaintEffect
from kvtiers.serving_defaults import HASH_SEED, NAMESPACE


class ServingEndpoint(Construct):
    """The endpoint's :class:`ServingChart` deployed as one manifest.

    Attributes: ``chart``, ``objects`` (the chart's, rendered once) and ``manifest``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster. Given the :class:`EksCluster` construct with a system node group, the
        endpoint opens what its pods need between system nodes (routers) and HyperPod nodes (engines): the engine
        port, and for ``kvaware`` the LMCache worker and controller ports. An imported cluster's rules are its
        owner's.
    :param name: the endpoint's name (prefixes every object).
    :param engine: the vLLM pods. They also tolerate the custom taints of their HyperPod group.
    :param router: the router in front of them.
    :param l2: the Curvine L2 to mount: the endpoint runs in its serving namespace, after its claim. @default None
        (no L2)
    :param hyperpod: the HyperPod cluster the engines run on: ``engine.instance_group`` must be one of its groups,
        ``engine.tensor_parallel_size`` at most the group's GPUs and the engine pod at most the instance's memory less
        the tiered-storage share (for the ``ml.g6e`` types kvtiers knows), and the engines tolerate the group's taints.
        @default the L2's HyperPod cluster; without ``l2`` nor ``hyperpod``, none of this is checked (a synth warning)
    :param namespace: the namespace of the engines and the router; with ``l2``, its serving namespace (which the L2
        creates). Without ``l2`` the chart does not create it: give the manifest that does in ``after``. @default the
        L2's serving namespace, else ``serving``
    :param hash_seed: ``PYTHONHASHSEED`` of every pod, and part of the L2 namespace. With ``l2`` it is the L2's
        (``CurvineL2(hash_seed=)``; another value is refused). @default the L2's, else ``"0"``
    :param l2_share_group: the L2 directory shared with the other endpoints of this group (same model and L2
        namespace). @default None: a directory of the endpoint's own
    :param secrets: the Secrets Manager secrets its pods read as files (API keys, a Hugging Face token): see
        :class:`~kvtiers.k8s_charts.serving.ServingChart`; give the access construct that lets them read them
        (:class:`~kvtiers.constructs.endpoint_secrets.EndpointSecretAccess`) in ``after``. @default None
    :param after: what the manifest waits for besides the L2 claim: the namespace's manifest when there is no
        ``l2``, the namespace's NetworkPolicies. @default none
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster | ClusterLike,
        name: str,
        engine: Engine,
        router: Router,
        l2: CurvineL2 | None = None,
        hyperpod: HyperPodCluster | None = None,
        namespace: str | None = None,
        hash_seed: str | None = None,
        l2_share_group: str | None = None,
        secrets: EndpointSecrets | None = None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        hash_seed = endpoint_hash_seed(f"ServingEndpoint {name!r}", hash_seed, l2)
        if l2 is not None and namespace is not None and namespace != l2.serving_namespace:
            raise ValueError(
                f"ServingEndpoint: namespace {namespace!r} is not the L2's serving namespace {l2.serving_namespace!r} "
                "(the claim is mounted only in its own namespace)"
            )
        if namespace is None:
            namespace = l2.serving_namespace if l2 is not None else NAMESPACE
        if hyperpod is None and l2 is not None:
            hyperpod = l2.hyperpod
        if hyperpod is not None:
            engine = _on_group(f"ServingEndpoint {name!r}", engine, hyperpod)
        else:
            cdk.Annotations.of(self).add_warning_v2(
                "kvtiers:serving-without-hyperpod",
                f"ServingEndpoint {name!r}: no hyperpod (nor l2): engine.instance_group {engine.instance_group!r}, its "
                "GPUs and memory are not checked against the HyperPod groups and the engines tolerate none of their "
                "custom taints; give hyperpod=HyperPodCluster(...)",
            )
        self.chart = ServingChart(
            cdk8s.App(),
            name,
            name=name,
            namespace=namespace,
            engine=engine,
            router=router,
            hash_seed=hash_seed,
            l2=l2.claim if l2 is not None else None,
            l2_share_group=l2_share_group,
            secrets=secrets,
        )
        self.objects: list[dict[str, Any]] = self.chart.to_json()
        cluster = eks_cluster.cluster if isinstance(eks_cluster, EksCluster) else eks_cluster
        # "Default": the manifest's logical ID is this construct's, as if the manifest were built in its place.
        self.manifest = eks.KubernetesManifest(
            self, "Default", cluster=as_cluster_interface(cluster), manifest=self.objects, overwrite=True
        )
        for dependency in (*([l2.ready] if l2 is not None else []), *after):
            self.manifest.node.add_dependency(dependency)
        if isinstance(eks_cluster, EksCluster) and eks_cluster.node_traffic is not None:
            _allow_serving_traffic(eks_cluster.node_traffic, engine, router)


def endpoint_hash_seed(where: str, hash_seed: str | None, l2: CurvineL2 | None) -> str:
    """One seed per L2: the L2's, unless the endpoint gives one (which must then be the L2's)."""
    if l2 is None:
        return hash_seed if hash_seed is not None else HASH_SEED
    if hash_seed is not None and hash_seed != l2.hash_seed:
        raise ValueError(
            f"{where}: hash_seed {hash_seed!r} is not the L2's {l2.hash_seed!r}; every endpoint of one L2 uses the "
            "L2's seed (CurvineL2(hash_seed=...))"
        )
    return l2.hash_seed


def tolerating_taints(engine: Engine, taints: Iterable[tuple[str, str, TaintEffect]]) -> Engine:
    """``engine`` also tolerating each ``(key, value, effect)`` taint (an empty value: any value), in their order."""
    wanted = dict.fromkeys(Toleration(key=k, value=v or None, effect=e) for k, v, e in taints)
    extra = tuple(t for t in wanted if t not in engine.tolerations)
    return dataclasses.replace(engine, tolerations=(*engine.tolerations, *extra)) if extra else engine


def _on_group(where: str, engine: Engine, hyperpod: HyperPodCluster) -> Engine:
    """``engine`` checked against its HyperPod group, tolerating the group's taints."""
    group = engine_group(where, engine, hyperpod)
    return tolerating_taints(engine, ((t.key, t.value, t.effect) for t in group.taints))


def engine_group(where: str, engine: Engine, hyperpod: HyperPodCluster) -> InstanceGroup:
    """The HyperPod group ``engine`` runs on, checked: it exists, has the GPUs of one pod and the memory (less the
    tiered-storage share) of one pod, for the ``ml.g6e`` types kvtiers knows."""
    groups = {g.name: g for g in hyperpod.instance_groups}
    check_instance_group(f"{where}: engine", engine.instance_group, groups)
    group = groups[engine.instance_group]
    instance = G6E_INSTANCE_TYPES.get(group.instance_type)
    if instance is not None:
        check_tensor_parallel_size(f"{where}: engine", engine.tensor_parallel_size, instance)
        tiered = tiered_storage_gib(
            instance,
            enabled=hyperpod.tiered_storage_enabled,
            memory_percentage=hyperpod.tiered_storage_memory_percentage,
        )
        check_pod_memory(f"{where}: engine", engine.sizing.memory_gib, instance, tiered_storage_gib=tiered)
    return group


def _allow_serving_traffic(traffic: NodeTraffic, engine: Engine, router: Router) -> None:
    traffic.allow_to_hyperpod(
        PortRule(
            protocol="tcp", port=ENGINE_PORT, reason="routers send requests to the vLLM engines and discover models"
        )
    )
    if router.routing != "kvaware":
        return
    traffic.allow_to_hyperpod(
        PortRule(
            protocol="tcp",
            port=LMCACHE_WORKER_PORT_BASE,
            reason="kvaware: the router's LMCache controller asks the engines' "
            "LMCache workers (one port per tensor-parallel rank)",
            to_port=LMCACHE_WORKER_PORT_BASE + engine.tensor_parallel_size - 1,
        )
    )
    traffic.allow_to_system(
        PortRule(
            protocol="tcp",
            port=LMCACHE_CONTROLLER_PULL_PORT,
            reason="kvaware: engines report their cache to the router's LMCache controller (pull and reply sockets)",
            to_port=LMCACHE_CONTROLLER_REPLY_PORT,
        )
    )
