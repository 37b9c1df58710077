"""One self-managed endpoint (vLLM + LMCache engines and the production-stack router) as a CDK construct: its chart
as one EKS manifest, after the L2 claim it mounts, with the node traffic its router and engines need, checked against
the HyperPod group it runs on and tolerating that group's taints; the Pod Identity access its pods need (S3 weights,
Secrets Manager secrets: one role, since a service account has one association) and its NetworkPolicies, both
before its pods."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.catalog.instance_types import G6E_INSTANCE_TYPES, check_instance_group
from kvtiers.catalog.platform_defaults import TaintEffect
from kvtiers.catalog.serving_defaults import HASH_SEED, NAMESPACE
from kvtiers.constructs.cluster_network import cluster_network
from kvtiers.constructs.eks_cluster import (
    ClusterLike,
    EksCluster,
    kubernetes_cluster,
    pod_identity_association,
)
from kvtiers.constructs.endpoint_registry import register_endpoint
from kvtiers.constructs.endpoint_secrets import EndpointSecretAccess, ImportedSecretsStore, SecretsStoreCsi
from kvtiers.constructs.hyperpod_cluster import InstanceGroup, register_agents
from kvtiers.constructs.interfaces import ICurvineL2, IHyperPodCluster
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.node_traffic import NodeTraffic, PortRule
from kvtiers.constructs.router_access import RouterAccess
from kvtiers.k8s_charts.names import (
    ENGINE_PORT,
    LMCACHE_CONTROLLER_PULL_PORT,
    LMCACHE_CONTROLLER_REPLY_PORT,
    LMCACHE_WORKER_PORT_BASE,
    engine_service_account_name,
    lmcache_worker_ports,
    pascal_case,
    router_name,
)
from kvtiers.k8s_charts.network_policies import ClusterNetwork, SelfManagedTraffic, ServingNetworkPolicyChart
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router, ServingChart
from kvtiers.k8s_charts.serving.placement import engine_workload, router_workload
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.k8s_charts.vllm import S3Weights
from kvtiers.node_agents import SECRETS_STORE_AGENTS
from kvtiers.parallelism import layout_advice


class ServingEndpoint(Construct):
    """The endpoint's :class:`ServingChart` deployed as one manifest, after the access and the NetworkPolicies its
    pods need.

    Attributes: ``chart``, ``objects`` (the chart's, rendered once) and ``manifest``; ``model_access`` (the
    :class:`ModelReadAccess`, None without S3 weights or with ``model_role``), ``secret_access`` (the
    :class:`EndpointSecretAccess`, None without ``secrets``), ``role`` (the Pod Identity role its engines read weights
    and secrets with, None without either), ``router_access`` (the :class:`RouterAccess`, the router's own role, None
    when the router needs no AWS access), ``policies`` (the NetworkPolicy manifest, None with
    ``network_policies=False``), ``policies_chart`` and ``policies_objects``.

    Construct ids (in ``access_scope``): ``<Name>ModelAccess``, ``<Name>RouterAccess``, ``<Name>Secrets`` and
    ``NetworkPolicies<Name>``,
    where ``<Name>`` is ``name`` in PascalCase.

    :param scope: the parent construct.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster. Given the :class:`EksCluster` construct with a system node group, the
        endpoint opens what its pods need between system nodes (routers) and HyperPod nodes (engines): the engine
        port, and for ``kvaware`` the LMCache worker and controller ports; and its routers must run on the system
        nodes (``Router.system_nodes``). An imported cluster's rules are its owner's.
    :param name: the endpoint's name (prefixes every object).
    :param engine: the vLLM pods. They also tolerate the custom taints of their HyperPod group. With
        :class:`~kvtiers.k8s_charts.vllm.S3Weights` the endpoint creates their read access (a
        :class:`ModelReadAccess` bound to the engines' service account) unless ``model_role`` is given;
        ``engine.model_role_arn`` is the endpoint's to set. The router never gets that role: a ``kvaware`` router,
        which copies the tokenizer, gets a :class:`RouterAccess` that reads only the tokenizer files.
    :param router: the router in front of them.
    :param l2: the Curvine L2 to mount: the endpoint runs in its serving namespace, after its claim. @default None
        (no L2)
    :param hyperpod: the HyperPod cluster the engines run on: ``engine.instance_group`` must be one of its groups,
        the engines tolerate the group's taints, and their pods (and ASCP's, with ``secrets``) are registered in its
        ``placement``, which fails synth unless they fit the group's nodes beside everything else there (CPU, memory,
        GPUs, pods, disk). @default the L2's HyperPod cluster; without ``l2`` nor ``hyperpod``, none of this is
        checked (a synth warning)
    :param namespace: the namespace of the engines and the router; with ``l2``, its serving namespace (which the L2
        creates). Without ``l2`` the chart does not create it: give the manifest that does in ``after``. @default the
        L2's serving namespace, else ``serving``
    :param hash_seed: ``PYTHONHASHSEED`` of every pod, and part of the L2 namespace. With ``l2`` it is the L2's
        (``CurvineL2(hash_seed=)``; another value is refused). @default the L2's, else ``"0"``
    :param l2_share_group: the L2 directory shared with the other endpoints of this group (same model and L2
        namespace). @default None: a directory of the endpoint's own
    :param secrets: the Secrets Manager secrets its pods read as files (API keys, a Hugging Face token): see
        :class:`~kvtiers.k8s_charts.serving.ServingChart`. The endpoint creates the API-key secret (a generated key,
        under the name ``secrets.api_key_secret``) and the :class:`EndpointSecretAccess` that lets its router (with
        its :class:`RouterAccess` role) and engines (with the role of the S3 weights when there is one: a service
        account has one Pod Identity association) read their secrets; it needs ``secrets_store``. @default None
    :param secrets_store: the ASCP add-on that mounts the secrets and the KMS key they are encrypted with; required
        with ``secrets``, and the endpoint comes after the add-on. @default None
    :param model_role: a role of your own that reads the S3 weights (trusting ``pods.eks.amazonaws.com``), instead of
        the :class:`ModelReadAccess` the endpoint creates; the endpoint binds its engines' service account to it and
        grants it the secrets (the router has its own role). Give it the trust conditions of
        :func:`~kvtiers.constructs.eks_cluster.pod_identity_role`. Only with S3 weights. @default None: a
        :class:`ModelReadAccess` of the endpoint's own
    :param network: where the Kubernetes API and its pod proxy are, for the NetworkPolicies: the
        :class:`HyperPodNetwork` (its VPC CIDR and EKS subnets, with the ``kubernetes`` Service address from
        ``EksCluster(service_ipv4_cidr=)``), or a :class:`~kvtiers.k8s_charts.network_policies.ClusterNetwork`.
        Required unless ``network_policies=False``. @default None
    :param network_policies: deploy the endpoint's NetworkPolicies (its router and engines admit only each other, the
        clients of ``router.client_cidrs`` or the VPC, the API server's proxy; egress HTTPS, DNS, Pod Identity) in a
        manifest of their own, before its pods. ``False`` leaves its pods open to every pod of the cluster; only an
        app that deploys the same policies itself should say so. @default True
    :param after: what the manifests wait for besides the L2 claim: the namespace's manifest when there is no
        ``l2``, the namespace's own NetworkPolicies (default deny). @default none
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
        l2: ICurvineL2 | None = None,
        hyperpod: IHyperPodCluster | None = None,
        namespace: str | None = None,
        hash_seed: str | None = None,
        l2_share_group: str | None = None,
        secrets: EndpointSecrets | None = None,
        secrets_store: SecretsStoreCsi | ImportedSecretsStore | None = None,
        model_role: iam.IRole | None = None,
        network: HyperPodNetwork | ClusterNetwork | None = None,
        network_policies: bool = True,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        where = f"ServingEndpoint {name!r}"
        hash_seed = endpoint_hash_seed(where, hash_seed, l2)
        namespace = endpoint_namespace(where, namespace, l2)
        s3 = engine.weights if isinstance(engine.weights, S3Weights) else None
        if engine.model_role_arn is not None:
            raise ValueError(
                f"{where}: engine.model_role_arn is set by the endpoint (the role of its S3 weights); give a role of "
                "your own as model_role="
            )
        if model_role is not None and s3 is None:
            raise ValueError(f"{where}: model_role reads S3 weights; engine.weights are not S3Weights")
        if secrets is not None and secrets_store is None:
            raise ValueError(
                f"{where}: secrets need secrets_store=SecretsStoreCsi(...): the add-on that mounts them and the KMS "
                "key the API-key secret is encrypted with"
            )
        if isinstance(eks_cluster, EksCluster) and eks_cluster.system_nodegroup is not None:
            router = dataclasses.replace(router, system_nodes=True)
        cluster_network_ = cluster_network(where, network, eks_cluster) if network_policies else None
        cluster = kubernetes_cluster(eks_cluster)
        register_endpoint(
            self,
            where,
            cluster=cluster,
            namespace=namespace,
            name=name,
            l2_namespace=engine.l2_namespace(hash_seed),
            serving="self_managed",
            l2_share_group=l2_share_group,
        )
        hyperpod = hyperpod if hyperpod is not None else (l2.hyperpod if l2 is not None else None)
        engine = self._place(where, name, namespace, engine, router, hyperpod, secrets is not None)
        before: list[Construct] = [*([l2.ready] if l2 is not None and l2.ready is not None else []), *after]
        self._grant_access(name, namespace, cluster, engine, router, model_role, secrets, secrets_store)
        if s3 is not None and self.role is not None:
            engine = dataclasses.replace(engine, model_role_arn=self.role.role_arn)
        self.policies: eks.KubernetesManifest | None = None
        self.policies_chart: ServingNetworkPolicyChart | None = None
        self.policies_objects: list[dict[str, Any]] = []
        if cluster_network_ is not None:
            self._deploy_policies(name, namespace, cluster, cluster_network_, engine, router, s3 is not None, before)
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
        # The endpoint's main resource: CDK's "Default" child, whose logical ID is the construct's.
        self.manifest = eks.KubernetesManifest(self, "Default", cluster=cluster, manifest=self.objects, overwrite=True)
        for dependency in (
            *before,
            *(c for c in (self.policies, self.model_access, self.router_access, self.secret_access) if c is not None),
            *self._associations,
            *(
                [secrets_store.addon]
                if secrets is not None and secrets_store is not None and secrets_store.addon
                else []
            ),
        ):
            self.manifest.node.add_dependency(dependency)
        if isinstance(eks_cluster, EksCluster) and eks_cluster.node_traffic is not None:
            _allow_serving_traffic(eks_cluster.node_traffic, engine, router)

    def _place(
        self,
        where: str,
        name: str,
        namespace: str,
        engine: Engine,
        router: Router,
        hyperpod: IHyperPodCluster | None,
        secrets: bool,
    ) -> Engine:
        """The engines checked against their HyperPod group and tolerating its taints; their pods (and the routers',
        and ASCP's with secrets) registered in the cluster's placement."""
        if hyperpod is None:
            cdk.Annotations.of(self).add_warning_v2(
                "kvtiers:serving-without-hyperpod",
                f"{where}: no hyperpod (nor l2): engine.instance_group {engine.instance_group!r}, its "
                "GPUs and memory are not checked against the HyperPod groups and the engines tolerate none of their "
                "custom taints; give hyperpod=HyperPodCluster(...) or HyperPodCluster.from_hyperpod_cluster_attributes",
            )
            return engine
        engine = _on_group(self, where, engine, hyperpod)
        hyperpod.placement.add(engine_workload(name, engine, namespace=namespace))
        routers = router_workload(
            name, router, namespace=namespace, groups=tuple(g.name for g in hyperpod.instance_groups)
        )
        if routers is not None:
            hyperpod.placement.add(routers)
        if secrets:
            register_agents(hyperpod.placement, SECRETS_STORE_AGENTS, hyperpod.instance_groups)
        return engine

    def _grant_access(
        self,
        name: str,
        namespace: str,
        cluster: eks.ICluster,
        engine: Engine,
        router: Router,
        model_role: iam.IRole | None,
        secrets: EndpointSecrets | None,
        secrets_store: SecretsStoreCsi | ImportedSecretsStore | None,
    ) -> None:
        """The engines' Pod Identity role (the weights', their own or the caller's, else the secrets') and the
        router's own (its secrets and a kvaware router's tokenizer files, never the weights): a service account has
        one association, each bound to its role."""
        pascal = pascal_case(name)
        s3 = engine.weights if isinstance(engine.weights, S3Weights) else None
        self.model_access: ModelReadAccess | None = None
        self._associations: list[Construct] = []
        self.role: iam.IRole | None = model_role
        engine_account, router_account = engine_service_account_name(name), router_name(name)
        if s3 is not None and model_role is None:
            self.model_access = ModelReadAccess(
                self,
                f"{pascal}ModelAccess",
                cluster=cluster,
                namespace=namespace,
                service_account=engine_account,
                bucket=s3.bucket,
                prefix=s3.prefix,
            )
            self.role = self.model_access.role
        tokenizer = s3 if router.routing == "kvaware" else None
        self.router_access: RouterAccess | None = None
        if secrets is not None or tokenizer is not None:
            self.router_access = RouterAccess(
                self,
                f"{pascal}RouterAccess",
                cluster=cluster,
                description=f"the router of kvtiers endpoint {name} (namespace {namespace})",
                tokenizer_weights=tokenizer,
            )
        engine_unbound = self.model_access is None and (secrets is not None or s3 is not None)
        self.secret_access: EndpointSecretAccess | None = None
        if secrets is not None:
            assert secrets_store is not None and self.router_access is not None
            self.secret_access = EndpointSecretAccess(
                self,
                f"{pascal}Secrets",
                cluster=cluster,
                namespace=namespace,
                key=secrets_store.key,
                api_key_secret_name=secrets.api_key_secret,
                hf_token_secret_name=secrets.hf_token_secret,
                # The router first: its association keeps the logical ID it had when it shared the engines' role.
                service_accounts=[router_account, *([engine_account] if engine_unbound else [])],
                role=self.role,
                account_roles={router_account: self.router_access.role},
            )
            self.role = self.secret_access.role
            return
        if self.router_access is not None:
            self._associations.append(
                pod_identity_association(
                    self,
                    f"RouterRole{pascal_case(router_account)}",
                    cluster_name=cluster.cluster_name,
                    namespace=namespace,
                    service_account=router_account,
                    role=self.router_access.role,
                )
            )
        if engine_unbound and self.role is not None:
            self._associations.append(
                pod_identity_association(
                    self,
                    f"ModelRole{pascal_case(engine_account)}",
                    cluster_name=cluster.cluster_name,
                    namespace=namespace,
                    service_account=engine_account,
                    role=self.role,
                )
            )

    def _deploy_policies(
        self,
        name: str,
        namespace: str,
        cluster: eks.ICluster,
        network: ClusterNetwork,
        engine: Engine,
        router: Router,
        s3_weights: bool,
        before: Sequence[Construct],
    ) -> None:
        """The endpoint's NetworkPolicies in a manifest of their own, before its pods: removing the endpoint deletes
        them (kubectl's prune would leave them)."""
        self.policies_chart = ServingNetworkPolicyChart(
            cdk8s.App(),
            f"network-policies-{name}",
            namespace=namespace,
            network=network,
            endpoints=[
                SelfManagedTraffic(
                    name=name,
                    kvaware_worker_ports=(lmcache_worker_ports(engine.gpus) if router.routing == "kvaware" else ()),
                    s3_weights=s3_weights,
                    client_cidrs=router.client_cidrs or None,
                )
            ],
            namespace_wide=False,
        )
        self.policies_objects = self.policies_chart.to_json()
        self.policies = eks.KubernetesManifest(
            self, "NetworkPolicies", cluster=cluster, manifest=self.policies_objects, overwrite=True
        )
        for dependency in before:
            self.policies.node.add_dependency(dependency)


def endpoint_namespace(where: str, namespace: str | None, l2: ICurvineL2 | None) -> str:
    """The endpoint's namespace: the L2's serving namespace (the claim is mounted only there), else ``namespace`` or
    ``serving``."""
    if l2 is None:
        return namespace if namespace is not None else NAMESPACE
    if namespace is not None and namespace != l2.serving_namespace:
        raise ValueError(
            f"{where}: namespace {namespace!r} is not the L2's serving namespace {l2.serving_namespace!r} (the claim "
            "is mounted only in its own namespace)"
        )
    return l2.serving_namespace


def endpoint_hash_seed(where: str, hash_seed: str | None, l2: ICurvineL2 | None) -> str:
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


def _on_group(scope: Construct, where: str, engine: Engine, hyperpod: IHyperPodCluster) -> Engine:
    """``engine`` checked against its HyperPod group, tolerating the group's taints."""
    group = engine_group(scope, where, engine, hyperpod)
    return tolerating_taints(engine, ((t.key, t.value, t.effect) for t in group.taints))


LAYOUT_WARNING = "kvtiers:tensor-parallel-over-pcie"
"""Id of the synth warning about an engine layout that is likely the slower one on its GPUs."""


def engine_group(scope: Construct, where: str, engine: Engine, hyperpod: IHyperPodCluster) -> InstanceGroup:
    """The HyperPod group ``engine`` runs on (it must be one); a synth warning when its layout is likely the slower
    one there (:mod:`kvtiers.parallelism`). Whether its pods fit, beside everything else on the group's nodes, is the
    HyperPod cluster's ``placement`` check at synth."""
    groups = {g.name: g for g in hyperpod.instance_groups}
    check_instance_group(f"{where}: engine", engine.instance_group, groups)
    group = groups[engine.instance_group]
    instance = G6E_INSTANCE_TYPES.get(group.instance_type)
    advice = (
        layout_advice(
            tensor_parallel_size=engine.tensor_parallel_size,
            pipeline_parallel_size=engine.pipeline_parallel_size,
            nvlink=instance.nvlink,
        )
        if instance is not None
        else None
    )
    if advice is not None:
        cdk.Annotations.of(scope).add_warning_v2(LAYOUT_WARNING, f"{where}: {advice} ({group.instance_type})")
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
            reason="kvaware: the router's LMCache controller asks the engines' LMCache workers (one port per rank)",
            to_port=LMCACHE_WORKER_PORT_BASE + engine.gpus - 1,
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
