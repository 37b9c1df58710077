"""The Curvine L2 on a HyperPod cluster, as one CDK construct: the masters' journal volumes, the EBS CSI driver
that attaches them (its role and add-on), the four Curvine charts in the order they need, the node traffic its CSI
controller needs, and the claim serving pods mount.

Everything a neighbour relies on is decided here once: the volume sizes (the EBS volumes and the static
PersistentVolumes read the same numbers), the worker nodes (the HyperPod groups' own counts), the tolerations (the
groups' own taints) and the order (EBS CSI after the HyperPod cluster, masters after EBS CSI, workers after the
masters, CSI after the workers, the claim after the CSI).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import aws_cdk as cdk
import cdk8s
import jsii
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IValidation

from kvtiers import checks
from kvtiers.catalog import serving_defaults
from kvtiers.catalog.aws_limits import GP3_MIN_IOPS, GP3_MIN_MIBPS
from kvtiers.catalog.platform_defaults import (
    EBS_CSI_DRIVER_VERSION,
    MIN_EBS_CSI_DRIVER_VERSION,
    REPELLING_TAINT_EFFECTS,
    SNAPSHOT_ON_DELETE,
    MasterCount,
)
from kvtiers.catalog.versions import DEFAULT_ENGINE_IMAGE
from kvtiers.change.manifests import MANIFEST_RESOURCE_TYPE, ObjectRef, manifest_resources
from kvtiers.constructs.cluster_network import cluster_network
from kvtiers.constructs.eks_cluster import (
    ChartManifests,
    EksCluster,
    addon_version,
    as_cluster_interface,
    cluster_key,
    pod_identity_role,
)
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, register_agents
from kvtiers.constructs.interfaces import IHyperPodCluster
from kvtiers.constructs.journal_volumes import EBS_CSI_MANAGED_POLICY, EBS_CSI_SERVICE_ACCOUNT, CurvineJournalVolumes
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.node_traffic import PortRule
from kvtiers.k8s_charts.curvine_l2 import (
    CurvineCluster,
    CurvineCsiChart,
    CurvineMasterChart,
    CurvineSettings,
    CurvineStorageChart,
    CurvineWorkerChart,
    MasterVolumeIds,
)
from kvtiers.k8s_charts.curvine_l2.charts import (
    DEFAULT_CLAIM_NAME,
    DEFAULT_CLAIM_SIZE_GIB,
    DEFAULT_JANITOR_INTERVAL_SECONDS,
)
from kvtiers.k8s_charts.curvine_l2.placement import curvine_workloads, janitor_workload
from kvtiers.k8s_charts.l2 import DEFAULT_MOUNT_PATH, L2Volume
from kvtiers.k8s_charts.names import CURVINE_JANITOR_METRICS_PORT
from kvtiers.k8s_charts.namespaces import NamespaceChart, PssLevel, serving_enforce_level
from kvtiers.k8s_charts.network_policies import (
    ClusterNetwork,
    CurvineNetworkPolicyChart,
    JanitorTraffic,
    ServingNetworkPolicyChart,
)
from kvtiers.k8s_charts.tolerations import tolerating
from kvtiers.node_agents import EBS_CSI_CONTROLLER, EBS_CSI_NODE

EBS_CSI_ADDON = "aws-ebs-csi-driver"
CURVINE_NODES_OPEN = "kvtiers:curvine-nodes-open"
"""Id of the synth warning about HyperPod groups that other workloads' pods can be scheduled on (acknowledge it with
``cdk.Annotations.of(scope).acknowledge_warning``, with the reason those nodes are dedicated anyway)."""
DEDICATION_TAINT_KEY = "kvtiers.io/dedicated"
"""The taint that dedicates a HyperPod group to kvtiers (any value, a repelling effect). Its own key, because other
workloads' pods tolerate the common ones by convention (``nvidia.com/gpu``, ``dedicated``)."""


class CurvineL2(Construct):
    """The Curvine L2 (masters on EBS, workers on the nodes' NVMe, CSI, StorageClass and claim).

    Attributes: ``journal`` (the :class:`CurvineJournalVolumes`), ``ebs_csi_role``, ``ebs_csi`` (the add-on),
    ``cluster`` (the :class:`CurvineCluster` every chart reads), ``charts``, ``objects`` (each chart's, rendered once)
    and ``manifests`` (by name, in deploy order), ``claim`` (the :class:`L2Volume` serving pods mount),
    ``serving_namespace`` (where the claim is), ``serving_namespace_enforce`` (the Pod Security level of the namespace
    it creates; None when given ``serving_namespace_manifest``), ``hyperpod`` (the :class:`HyperPodCluster` it runs on),
    ``ready`` (the claim's manifest: serving pods that mount the claim come after it) and ``serving_namespace_ready``
    (the namespace's manifest and its NetworkPolicies: what an endpoint in the namespace without the L2 comes after).

    :param scope: the parent construct; the journal volumes and the EBS CSI role live here.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster; the EBS CSI add-on is added to it, and the CSI controller's port to the
        masters to its node traffic. With a system node group, the CSI controller must run there (off the GPU nodes).
    :param hyperpod: the HyperPod cluster: every group runs a CSI node pod; the worker groups' node counts are the
        workers, the groups' taints are tolerated, and EBS CSI attaches through it. Every Curvine pod on its nodes
        (and the EBS CSI node plugin) is registered in its ``placement``: synth fails where they do not fit. The worker
        groups must have at least ``masters`` nodes (one master to a node), else the construct refuses them.
    :param network: the network of the HyperPod subnet, in whose availability zone the journal volumes are.
    :param masters: Curvine masters, 1, 3 or 5 (an odd Raft quorum), fixed at install. @default 1
    :param worker_groups: the HyperPod groups that run a worker and the masters. @default every group
    :param settings: names, volume sizes, cache geometry, eviction, ports, images and budgets. @default
        ``CurvineSettings()``
    :param volume_iops: provisioned IOPS of every journal volume. @default 3000, the gp3 baseline
    :param volume_throughput_mibps: provisioned throughput of every journal volume. @default 125, the gp3 baseline
    :param snapshot_on_delete: snapshot the journal volumes when the stack deletes them. @default snapshot
    :param ebs_csi_driver_version: the ``aws-ebs-csi-driver`` add-on version, 1.47.0 or later (the first that
        attaches volumes to HyperPod nodes). @default ``platform_defaults.EBS_CSI_DRIVER_VERSION``
    :param serving_namespace: namespace of the claim and the janitor (the serving pods'). @default ``serving``
    :param claim_name: the claim serving pods mount. @default ``curvine-l2``
    :param claim_size_gib: nominal size of the claim (Curvine does not enforce it). @default 100
    :param mount_path: where serving pods mount the claim. @default ``/mnt/curvine/l2cache``
    :param hash_seed: ``PYTHONHASHSEED`` of every serving pod that uses this L2 (LMCache's chunk hashes), part of
        every endpoint's L2 namespace; the endpoint constructs take it from here. @default ``"0"``
    :param janitor_image: the image the L2 janitor runs in (one with Python 3 that the nodes already pull). @default
        the default engine image
    :param janitor_interval_seconds: time between janitor runs (at least 60). @default 600
    :param network_policies: deploy the L2's NetworkPolicies: the Curvine namespace's (default deny; masters admit
        only each other, the CSI controller, the HyperPod nodes, the janitor and the API server's proxy), after the
        masters and before any other Curvine pod; and, in a serving namespace this construct creates, the namespace's
        own (default deny, DNS, the janitor, and with ``operator_endpoints`` the operator's pods), before the claim.
        ``False`` leaves Curvine, which authenticates nothing, open to every pod of the cluster: only for a team that
        deploys equivalent policies itself. @default True
    :param serving_namespace_manifest: the manifest that creates ``serving_namespace``; the claim comes after it.
        @default none: this construct creates the namespace (Pod Security ``baseline``, which the self-managed
        engines meet) as the manifest ``ServingNamespace``, retained when it leaves the stack (CloudFormation then
        never runs its ``kubectl delete``, which would delete the namespace and every endpoint, claim and janitor in
        it); so moving to a manifest of your own later keeps the namespace. No other manifest may declare the same
        namespace on the same cluster (synth fails): deleting either would delete it. A manifest given here is retained
        too and must have ``overwrite=True``
    :param operator_endpoints: endpoints of the HyperPod Inference Operator will run in the serving namespace this
        construct creates, so it enforces Pod Security ``privileged`` there (the operator writes its pods' security
        context, which kvtiers does not know; warn and audit still report). @default False: ``baseline``, which the
        self-managed engines meet
    :param manifests_scope: where the Kubernetes manifests are created, for an app that keeps its AWS resources and
        its Kubernetes objects in separate stacks (the journal volumes and EBS CSI stay in ``scope``). @default this
        construct
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster,
        hyperpod: HyperPodCluster,
        network: HyperPodNetwork,
        masters: MasterCount = 1,
        worker_groups: Sequence[str] | None = None,
        settings: CurvineSettings | None = None,
        volume_iops: int = GP3_MIN_IOPS,
        volume_throughput_mibps: int = GP3_MIN_MIBPS,
        snapshot_on_delete: bool = SNAPSHOT_ON_DELETE,
        ebs_csi_driver_version: str = EBS_CSI_DRIVER_VERSION,
        serving_namespace: str = serving_defaults.NAMESPACE,
        claim_name: str = DEFAULT_CLAIM_NAME,
        claim_size_gib: int = DEFAULT_CLAIM_SIZE_GIB,
        mount_path: str = DEFAULT_MOUNT_PATH,
        hash_seed: str = serving_defaults.HASH_SEED,
        janitor_image: str = DEFAULT_ENGINE_IMAGE,
        janitor_interval_seconds: int = DEFAULT_JANITOR_INTERVAL_SECONDS,
        network_policies: bool = True,
        serving_namespace_manifest: Construct | None = None,
        operator_endpoints: bool = False,
        manifests_scope: Construct | None = None,
    ) -> None:
        super().__init__(scope, id)
        settings = settings if settings is not None else CurvineSettings()
        workers = _checked_worker_groups(hyperpod, worker_groups)
        _check_ebs_csi_version(ebs_csi_driver_version)
        checks.hash_seed("CurvineL2", hash_seed)
        if settings.namespace == serving_namespace:
            raise ValueError(
                f"CurvineL2: settings.namespace and serving_namespace are both {serving_namespace!r}; they must differ "
                "(the Curvine namespace's default-deny policies would cut off the serving pods)"
            )
        policy_network = (
            cluster_network(
                "CurvineL2",
                network,
                eks_cluster,
                otherwise="or network_policies=False if you deploy equivalent policies yourself",
            )
            if network_policies
            else None
        )
        self.claim = L2Volume(claim_name=claim_name, mount_path=mount_path)
        self.hash_seed = hash_seed
        self.serving_namespace = serving_namespace
        self.serving_namespace_enforce: PssLevel | None = (
            serving_enforce_level(operator_endpoints) if serving_namespace_manifest is None else None
        )
        self.hyperpod = hyperpod
        self._attach_journal(
            eks_cluster,
            hyperpod,
            network,
            masters=masters,
            settings=settings,
            iops=volume_iops,
            throughput_mibps=volume_throughput_mibps,
            snapshot_on_delete=snapshot_on_delete,
            ebs_csi_driver_version=ebs_csi_driver_version,
        )
        # After the journal volumes, which refuse a master count other than 1, 3 or 5 first.
        _check_master_nodes(hyperpod, workers, masters)
        _warn_about_open_groups(self, hyperpod)
        self._place(eks_cluster, hyperpod, settings, workers, explicit_workers=worker_groups is not None)
        k8s_app = cdk8s.App()
        deployed = ChartManifests(
            manifests_scope if manifests_scope is not None else self, as_cluster_interface(eks_cluster.cluster)
        )
        self.charts, self.objects, self.manifests = deployed.charts, deployed.objects, deployed.manifests
        csi = self._deploy_curvine(deployed, k8s_app, policy_network, network)
        self.serving_namespace_ready: tuple[Construct, ...] = tuple(
            self._serving_namespace(
                deployed, k8s_app, policy_network, serving_namespace_manifest, operator_endpoints=operator_endpoints
            )
        )
        before_storage = [csi, *self.serving_namespace_ready]
        storage = CurvineStorageChart(
            k8s_app,
            "curvine-storage",
            cluster=self.cluster,
            serving_namespace=serving_namespace,
            janitor_image=janitor_image,
            claim_name=claim_name,
            claim_size_gib=claim_size_gib,
            janitor_interval_seconds=janitor_interval_seconds,
        )
        self.ready = deployed.deploy("CurvineStorage", storage, before_storage)

    def _attach_journal(
        self,
        eks_cluster: EksCluster,
        hyperpod: HyperPodCluster,
        network: HyperPodNetwork,
        *,
        masters: MasterCount,
        settings: CurvineSettings,
        iops: int,
        throughput_mibps: int,
        snapshot_on_delete: bool,
        ebs_csi_driver_version: str,
    ) -> None:
        """The masters' journal volumes in the HyperPod subnet's zone, and the EBS CSI driver (its role may attach
        only them, through the HyperPod cluster) that mounts them on HyperPod nodes."""
        self.journal = CurvineJournalVolumes(
            self,
            "Journal",
            availability_zone=network.hyperpod_availability_zone,
            masters=masters,
            meta_size_gib=settings.meta_volume_gib,
            journal_size_gib=settings.journal_volume_gib,
            iops=iops,
            throughput_mibps=throughput_mibps,
            snapshot_on_delete=snapshot_on_delete,
        )
        self.ebs_csi_role = pod_identity_role(
            self,
            "EbsCsiRole",
            cluster=eks_cluster.cluster,
            description="EBS CSI controller (Curvine journal volumes on HyperPod)",
        )
        self.ebs_csi_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(EBS_CSI_MANAGED_POLICY))
        self.journal.grant_attach(
            self.ebs_csi_role,
            hyperpod_cluster_arn=hyperpod.cluster_arn,
            eks_cluster_arn=eks_cluster.cluster.cluster_arn,
        )
        self.ebs_csi = eks_cluster.add_addon(
            EBS_CSI_ADDON, ebs_csi_driver_version, role=self.ebs_csi_role, service_account=EBS_CSI_SERVICE_ACCOUNT
        )
        # The driver's node pods run on HyperPod nodes, and it attaches through the HyperPod cluster's API.
        self.ebs_csi.node.add_dependency(hyperpod.cluster)
        # Its pods take the role's credentials at start: every policy of the role must exist by then.
        self.ebs_csi.node.add_dependency(self.ebs_csi_role)

    def _place(
        self,
        eks_cluster: EksCluster,
        hyperpod: HyperPodCluster,
        settings: CurvineSettings,
        workers: tuple[str, ...],
        *,
        explicit_workers: bool,
    ) -> None:
        """The :class:`CurvineCluster` every chart reads (worker nodes from the groups' counts, their taints
        tolerated), its pods registered in the HyperPod placement, and the CSI controller's port to the masters."""
        groups = {g.name: g for g in hyperpod.instance_groups}
        self.cluster = CurvineCluster(
            **settings.settings(),
            master_volumes=tuple(
                MasterVolumeIds(meta_volume_id=v.meta.volume_id, journal_volume_id=v.journal.volume_id)
                for v in self.journal.volumes
            ),
            availability_zone=self.journal.availability_zone,
            hyperpod_groups=tuple(groups),
            worker_nodes=sum(groups[name].count for name in workers),
            worker_groups=workers if explicit_workers else None,
            tolerations=tolerating((t.key, t.value, t.effect) for g in hyperpod.instance_groups for t in g.taints),
            controller_off_hyperpod=eks_cluster.system_nodegroup is not None,
        )
        register_agents(hyperpod.placement, (EBS_CSI_NODE, EBS_CSI_CONTROLLER), hyperpod.instance_groups)
        for workload in (
            *curvine_workloads(self.cluster),
            janitor_workload(self.cluster, serving_namespace=self.serving_namespace),
        ):
            hyperpod.placement.add(workload)
        if eks_cluster.node_traffic is not None:
            eks_cluster.node_traffic.allow_to_hyperpod(
                PortRule(
                    protocol="tcp",
                    port=self.cluster.ports.master_rpc,
                    reason="Curvine CSI controller creates L2 volumes on the Curvine masters",
                )
            )

    def _deploy_curvine(
        self,
        deployed: ChartManifests,
        k8s_app: cdk8s.App,
        policy_network: ClusterNetwork | None,
        network: HyperPodNetwork,
    ) -> eks.KubernetesManifest:
        """Masters (with the Curvine namespace), its NetworkPolicies, workers, CSI, in that order; the CSI's
        manifest."""
        # The static PersistentVolumes need the EBS CSI driver (and the HyperPod nodes it attaches through).
        masters = deployed.deploy(
            "CurvineMasters", CurvineMasterChart(k8s_app, "curvine-masters", cluster=self.cluster), [self.ebs_csi]
        )
        cdk.Annotations.of(masters).add_info(self.cluster.master_count_note)
        before_workers: list[Construct] = [masters]
        if policy_network is not None:
            # The namespace comes with the masters; its policies follow it, before any other Curvine pod.
            policies = self._curvine_policies(k8s_app, policy_network, network, self.serving_namespace)
            before_workers.append(deployed.deploy("CurvineNetworkPolicies", policies, [masters]))
        workers = deployed.deploy(
            "CurvineWorkers", CurvineWorkerChart(k8s_app, "curvine-workers", cluster=self.cluster), before_workers
        )
        return deployed.deploy("CurvineCsi", CurvineCsiChart(k8s_app, "curvine-csi", cluster=self.cluster), [workers])

    def _serving_namespace(
        self,
        deployed: ChartManifests,
        k8s_app: cdk8s.App,
        policy_network: ClusterNetwork | None,
        manifest: Construct | None,
        *,
        operator_endpoints: bool,
    ) -> list[Construct]:
        """The serving namespace's manifest (the caller's, or one of this construct's with the namespace's own
        NetworkPolicies), retained when it leaves the stack; what the claim comes after."""
        if manifest is not None:
            if isinstance(manifest, eks.KubernetesManifest):
                _retain_namespace_manifest(manifest)
            return [manifest]
        namespace = NamespaceChart(
            k8s_app,
            "serving-namespace",
            names=(self.serving_namespace,),
            enforce={self.serving_namespace: serving_enforce_level(operator_endpoints)},
        )
        created = deployed.deploy("ServingNamespace", namespace, [])
        self.node.add_validation(_OneNamespaceManifest(created, self.serving_namespace))
        _retain_namespace_manifest(created)
        if policy_network is None:
            return [created]
        # Default deny from the namespace's first pod (the janitor) on.
        policies = ServingNetworkPolicyChart(
            k8s_app,
            "serving-network-policies",
            namespace=self.serving_namespace,
            network=policy_network,
            endpoints=(),
            janitor=JanitorTraffic(
                curvine_namespace=self.cluster.namespace,
                master_web_port=self.cluster.ports.master_web,
                metrics_port=CURVINE_JANITOR_METRICS_PORT,
            ),
            operator_managed=operator_endpoints,
        )
        return [created, deployed.deploy("ServingNetworkPolicies", policies, [created])]

    @staticmethod
    def from_curvine_l2_attributes(
        scope: Construct,
        id: str,
        *,
        serving_namespace: str,
        hash_seed: str,
        claim_name: str = DEFAULT_CLAIM_NAME,
        mount_path: str = DEFAULT_MOUNT_PATH,
        hyperpod: IHyperPodCluster | None = None,
        serving_namespace_enforce: PssLevel | None = None,
    ) -> ImportedCurvineL2:
        """A Curvine L2 another stack or team deployed, for :class:`~kvtiers.constructs.ServingEndpoint` and
        :class:`~kvtiers.constructs.OperatorServingEndpoint` to mount. Its owner's stack has deployed the claim, the
        serving namespace and its NetworkPolicies already; the endpoints deploy their own policies.

        :param serving_namespace: the namespace of the claim (``CurvineL2(serving_namespace=)``).
        :param hash_seed: the L2's hash seed (``CurvineL2(hash_seed=)``): every endpoint on the L2 uses it.
        :param claim_name: the claim. @default ``curvine-l2``
        :param mount_path: where serving pods mount it. @default ``/mnt/curvine/l2cache``
        :param hyperpod: the HyperPod cluster the L2 runs on (``HyperPodCluster.from_hyperpod_cluster_attributes``),
            the endpoints' default. @default None
        :param serving_namespace_enforce: the Pod Security level the namespace enforces: an operator endpoint is
            refused on one that is not ``privileged``, and on an unknown one. @default None (unknown: fine for
            self-managed endpoints, which meet ``baseline``)
        """
        return ImportedCurvineL2(
            scope,
            id,
            serving_namespace=serving_namespace,
            hash_seed=hash_seed,
            claim_name=claim_name,
            mount_path=mount_path,
            hyperpod=hyperpod,
            serving_namespace_enforce=serving_namespace_enforce,
        )

    def _curvine_policies(
        self, k8s_app: cdk8s.App, policy_network: ClusterNetwork, network: HyperPodNetwork, serving_namespace: str
    ) -> CurvineNetworkPolicyChart:
        """The Curvine namespace's policies, from the L2's own ports; the HyperPod nodes are the HyperPod subnet (the
        whole VPC when an imported VPC does not give its CIDR)."""
        ports = self.cluster.ports
        return CurvineNetworkPolicyChart(
            k8s_app,
            "curvine-network-policies",
            namespace=self.cluster.namespace,
            network=policy_network,
            hyperpod_cidr=network.hyperpod_subnet_cidr or policy_network.node_cidr,
            master_rpc_port=ports.master_rpc,
            journal_port=ports.journal,
            master_web_port=ports.master_web,
            worker_rpc_port=ports.worker_rpc,
            janitor_namespace=serving_namespace,
        )


class ImportedCurvineL2(Construct):
    """A Curvine L2 deployed by another stack or team (:meth:`CurvineL2.from_curvine_l2_attributes`): the claim,
    its namespace and hash seed, and the HyperPod cluster it runs on. ``ready`` is None: it is deployed already."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        serving_namespace: str,
        hash_seed: str,
        claim_name: str,
        mount_path: str,
        hyperpod: IHyperPodCluster | None,
        serving_namespace_enforce: PssLevel | None,
    ) -> None:
        super().__init__(scope, id)
        checks.dns_label("CurvineL2.from_curvine_l2_attributes", "serving_namespace", serving_namespace)
        checks.hash_seed("CurvineL2.from_curvine_l2_attributes", hash_seed)
        self.claim = L2Volume(claim_name=claim_name, mount_path=mount_path)
        self.serving_namespace = serving_namespace
        self.hash_seed = hash_seed
        self.hyperpod = hyperpod
        self.serving_namespace_enforce = serving_namespace_enforce
        self.ready: Construct | None = None


def _retain_namespace_manifest(manifest: eks.KubernetesManifest) -> None:
    """The manifest that creates the serving namespace is never deleted with the stack's resources (the kubectl
    handler's Delete is ``kubectl delete``, which takes the claim, the janitor and every endpoint with it: on a removal,
    on a new logical ID, and on the rollback of a deploy that created it). It must apply over a namespace that may
    already exist (``overwrite``: the handler's create is ``kubectl create`` otherwise, which fails on it)."""
    if _properties(manifest).get("Overwrite") is not True:
        raise ValueError(
            f"CurvineL2: serving_namespace_manifest {manifest.node.path} needs overwrite=True: the namespace may "
            "already exist (created by this construct before), and the kubectl handler's create without it fails"
        )
    cast(cdk.CfnResource, manifest.node.default_child).apply_removal_policy(cdk.RemovalPolicy.RETAIN)


@jsii.implements(IValidation)
class _OneNamespaceManifest:
    """Synth fails when another manifest on the cluster declares the namespace ``manifest`` creates: CloudFormation
    deleting either manifest (a removal, a new logical ID) runs ``kubectl delete`` of the Namespace, and with it
    every object in it."""

    def __init__(self, manifest: eks.KubernetesManifest, namespace: str) -> None:
        self._manifest = manifest
        self._namespace = namespace

    def validate(self) -> list[str]:
        wanted = ObjectRef(group="", kind="Namespace", namespace="", name=self._namespace)
        # The manifests that declare the namespace first (one resolve each), the clusters of those only.
        declaring = [
            other
            for other in self._manifest.node.root.node.find_all()
            if isinstance(other, eks.KubernetesManifest) and other is not self._manifest and wanted in _declared(other)
        ]
        if not declaring:
            return []
        cluster = _cluster_name(self._manifest)
        return [
            f"CurvineL2: the manifest {other.node.path} also declares Namespace {self._namespace!r}, which the L2's "
            f"manifest {self._manifest.node.path} creates; deleting either would delete the namespace and "
            "everything in it. Pass the manifest that creates it as serving_namespace_manifest= instead"
            for other in declaring
            if _cluster_name(other) == cluster
        ]


def _properties(manifest: eks.KubernetesManifest) -> dict[str, Any]:
    # The custom resource's properties as CloudFormation receives them (KubernetesManifest exposes no getter).
    resource = cast(cdk.CfnResource, manifest.node.default_child)
    return cast(dict[str, Any], cdk.Stack.of(manifest).resolve(resource._cfn_properties))


def _cluster_name(manifest: eks.KubernetesManifest) -> str:
    resource = cast(cdk.CfnResource, manifest.node.default_child)
    return cluster_key(cdk.Stack.of(manifest), resource._cfn_properties.get("ClusterName"))


def _declared(manifest: eks.KubernetesManifest) -> set[ObjectRef]:
    template = {"Resources": {"M": {"Type": MANIFEST_RESOURCE_TYPE, "Properties": _properties(manifest)}}}
    return {ref for resource in manifest_resources({"S": template}).values() for ref in resource.refs}


def _warn_about_open_groups(scope: Construct, hyperpod: HyperPodCluster) -> None:
    """Curvine v0.4.1 authenticates nothing: its masters accept RPC from the whole HyperPod subnet, and every
    HyperPod node runs the CSI's FUSE client, which mounts the whole L2. Every HyperPod group is therefore a Curvine
    node group, and isolation rests on no other workload's pod running there: the dedication taint on each group
    (the kvtiers pods tolerate the groups' own taints)."""
    open_groups = [
        g.name
        for g in hyperpod.instance_groups
        if not any(t.key == DEDICATION_TAINT_KEY and t.effect in REPELLING_TAINT_EFFECTS for t in g.taints)
    ]
    if not open_groups:
        return
    cdk.Annotations.of(scope).add_warning_v2(
        CURVINE_NODES_OPEN,
        f"HyperPod group(s) {', '.join(open_groups)} have no {DEDICATION_TAINT_KEY} taint (NoSchedule or NoExecute), "
        "so pods of other workloads can be scheduled on the Curvine nodes. Curvine v0.4.1 has no authentication: from there a pod "
        "can reach the masters' and workers' RPC and read or overwrite every endpoint's KV cache. Dedicate the "
        "groups to kvtiers with a taint (and no deep health checks, InstanceGroup(deep_health_checks=()), which AWS "
        "requires with taints), or acknowledge "
        "this warning if nothing else can create pods in this cluster (docs/security.md, What Curvine cannot enforce)",
    )


def _checked_worker_groups(hyperpod: HyperPodCluster, worker_groups: Sequence[str] | None) -> tuple[str, ...]:
    """The groups that run a worker (every group by default), each one of the HyperPod cluster's."""
    groups = [g.name for g in hyperpod.instance_groups]
    workers = tuple(groups) if worker_groups is None else tuple(worker_groups)
    unknown = sorted(set(workers) - set(groups))
    if unknown:
        raise ValueError(f"CurvineL2: worker_groups {unknown} are not groups of the HyperPod cluster {groups}")
    return workers


def _check_master_nodes(hyperpod: HyperPodCluster, workers: tuple[str, ...], masters: int) -> None:
    """Every master needs a node of its own in the worker groups: the chart gives the masters a required
    anti-affinity on ``kubernetes.io/hostname``, so a master beyond the node count stays Pending for good, and a Raft
    group that lost one more master has no quorum. Worker groups without a node at all are ``CurvineCluster``'s own
    refusal (``worker_nodes`` at least 1), the more exact message."""
    counts = {g.name: g.count for g in hyperpod.instance_groups}
    nodes = sum(counts[name] for name in workers)
    if 0 < nodes < masters:
        groups = ", ".join(f"{name} ({counts[name]})" for name in workers)
        raise ValueError(
            f"CurvineL2: masters {masters} need {masters} nodes in worker_groups (one master to a node: required "
            f"anti-affinity on kubernetes.io/hostname), but they have {nodes}: {groups}; give the worker groups at "
            f"least {masters} nodes, or fewer masters (the master count is fixed at install)"
        )


def _check_ebs_csi_version(version: str) -> None:
    if addon_version(version) < MIN_EBS_CSI_DRIVER_VERSION:
        minimum = ".".join(map(str, MIN_EBS_CSI_DRIVER_VERSION))
        raise ValueError(
            f"CurvineL2: ebs_csi_driver_version {version} is older than v{minimum}, the first that attaches volumes "
            "to HyperPod nodes (AttachClusterNodeVolume)"
        )
