"""The Curvine L2 as four cdk8s charts, each deployed as one manifest in this order: masters (with the static EBS
PersistentVolumes and the cluster config), workers (node-local NVMe), CSI driver, StorageClass + L2 claim.

Objects are cdk8s's typed Kubernetes classes, not cdk8s-plus workloads: those add their own selector label
(``cdk8s.io/metadata.addr``), and a changed selector on a deployed StatefulSet or DaemonSet cannot be applied.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers.catalog import curvine_defaults as defaults
from kvtiers.checks import dns_label, in_range, invalid, pinned_image
from kvtiers.k8s_charts.curvine_l2.props import (
    CONF_PATH,
    CSI_HOME,
    DATA_MOUNT,
    FUSE_CONF_PATH,
    GRACE_SECONDS,
    JOURNAL_MOUNT,
    META_MOUNT,
    MOUNT_MODE,
    PROVISIONER_TIMEOUT_S,
    SERVER_BINARY,
    SERVER_HOME,
    CurvineCluster,
    Resources,
)
from kvtiers.k8s_charts.int_or_string import int_or_string
from kvtiers.k8s_charts.names import (
    CURVINE_CONFIG_CHECKSUM_ANNOTATION,
    CURVINE_CONFIG_KEY,
    CURVINE_CONFIG_MAP,
    CURVINE_CSI_CONTROLLER,
    CURVINE_CSI_HEALTH_PORT,
    CURVINE_CSI_NODE,
    CURVINE_DRIVER,
    CURVINE_JANITOR,
    CURVINE_JANITOR_COMPONENT,
    CURVINE_JANITOR_METRICS_PORT,
    CURVINE_JANITOR_SCRIPT_CHECKSUM_ANNOTATION,
    CURVINE_MASTER,
    CURVINE_STATIC_CLASS,
    CURVINE_STORAGE_CLASS,
    CURVINE_WORKER,
    HYPERPOD_INSTANCE_GROUP,
    JANITOR_L2_MOUNT,
    component_labels,
    curvine_master_host,
)
from kvtiers.k8s_charts.namespaces import pod_security_labels
from kvtiers.k8s_charts.scheduling import off_hyperpod
from kvtiers.k8s_charts.security import container_security_context, pod_security_context, quantity

CURVINE_ENFORCE = "privileged"
"""Pod Security level enforced in the Curvine namespace: the CSI node plugin is privileged (FUSE mounts with
bidirectional propagation) and the FUSE processes the driver starts run inside it; workers use the host network and
a hostPath. Masters and the CSI controller meet restricted, which warn/audit report for every pod."""
KUBELET = "/var/lib/kubelet"
PLUGIN_DIR = f"{KUBELET}/plugins/{CURVINE_DRIVER}"
CSI_SOCKET = "/csi/csi.sock"
NVME_CHECK_SCRIPT = (Path(__file__).parent / "nvme_check.sh").read_text()
NVME_CHECK_TARGET = "/host/nvme"
JANITOR_SCRIPT = Path(__file__).parent / "l2_janitor.py"
DEFAULT_CLAIM_NAME = defaults.CLAIM_NAME
DEFAULT_CLAIM_SIZE_GIB = defaults.CLAIM_SIZE_GIB
DEFAULT_JANITOR_INTERVAL_SECONDS = defaults.JANITOR_INTERVAL_SECONDS
MIN_JANITOR_INTERVAL_SECONDS = defaults.MIN_JANITOR_INTERVAL_SECONDS
RBAC_GROUP = "rbac.authorization.k8s.io"
CSI_CONTROLLER_TMP_GIB = 1
"""Scratch of the helper processes the CSI controller runs."""


def api_object(
    chart: Construct, id: str, api_version: str, kind: str, metadata: dict[str, Any], body: dict[str, Any]
) -> cdk8s.ApiObject:
    """A raw object, for the kinds that have no typed class (custom resources)."""
    obj = cdk8s.ApiObject(chart, id, api_version=api_version, kind=kind, metadata=cdk8s.ApiObjectMetadata(**metadata))
    for key, value in body.items():
        obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj


def _env(name: str, *, field: str | None = None, value: str | None = None) -> k8s.EnvVar:
    if field:
        return k8s.EnvVar(name=name, value_from=k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path=field)))
    return k8s.EnvVar(name=name, value=value)


def _in_groups(groups: tuple[str, ...]) -> k8s.NodeAffinity:
    return k8s.NodeAffinity(
        required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
            node_selector_terms=[
                k8s.NodeSelectorTerm(
                    match_expressions=[
                        k8s.NodeSelectorRequirement(key=HYPERPOD_INSTANCE_GROUP, operator="In", values=list(groups))
                    ]
                )
            ]
        )
    )


def _config_volume(path: str = CONF_PATH) -> tuple[k8s.Volume, k8s.VolumeMount]:
    """The cluster ConfigMap as a volume and its mount as the single file ``path``."""
    return (
        k8s.Volume(name="config", config_map=k8s.ConfigMapVolumeSource(name=CURVINE_CONFIG_MAP)),
        k8s.VolumeMount(name="config", mount_path=path, sub_path=CURVINE_CONFIG_KEY, read_only=True),
    )


def _tcp_probe(port: int, period: int, failures: int | None = None) -> k8s.Probe:
    return k8s.Probe(
        tcp_socket=k8s.TcpSocketAction(port=int_or_string(port)), period_seconds=period, failure_threshold=failures
    )


def _server_container(
    service: str,
    cluster: CurvineCluster,
    *,
    resources: Resources,
    hostname_env: list[k8s.EnvVar],
    ports: dict[str, int],
    rpc: int,
    mounts: list[k8s.VolumeMount],
    startup: bool,
    root: bool,
) -> k8s.Container:
    """A ``curvine-server`` container (master or worker): config file, bind address, TCP probes on the RPC port.

    The server binary is the container's command, not the image's entrypoint script: the script keeps bash as PID 1
    without a signal handler and tees the log into an unrotated file, so SIGTERM never reached the server. The
    binary handles SIGTERM itself (graceful shutdown) and logs to stdout.
    """
    return k8s.Container(
        name=service,
        image=cluster.images.runtime_image,
        image_pull_policy="IfNotPresent",
        command=[SERVER_BINARY],
        args=["--service", service, "--conf", CONF_PATH],
        working_dir=SERVER_HOME,
        env=[*hostname_env, _env("ORPC_BIND_HOSTNAME", value="0.0.0.0")],
        ports=[k8s.ContainerPort(name=name, container_port=port) for name, port in ports.items()],
        readiness_probe=_tcp_probe(rpc, 5),
        liveness_probe=_tcp_probe(rpc, 10, 6),
        # A master replays its journal before it listens: give it up to 15 minutes.
        startup_probe=_tcp_probe(rpc, 10, 90) if startup else None,
        resources=resources.to_k8s(),
        volume_mounts=mounts,
        # The server writes only its configured directories (meta/journal or data, all volumes) and logs to
        # stdout (LogConf default, logger.rs): the image's root filesystem stays read-only.
        security_context=container_security_context(root=root),
    )


def _storage(gib: int) -> dict[str, k8s.Quantity]:
    return {"storage": quantity(f"{gib}Gi")}


class CurvineMasterChart(cdk8s.Chart):
    """Namespace, cluster config, static PersistentVolumes on the CDK journal volumes, masters, PDB."""

    def __init__(self, scope: Construct, id: str, *, cluster: CurvineCluster) -> None:
        """:param cluster: the Curvine L2 these masters serve."""
        super().__init__(scope, id, disable_resource_name_hashes=True)
        c = cluster
        labels = component_labels(CURVINE_MASTER, "master")
        ns = k8s.KubeNamespace(
            self,
            "namespace",
            metadata=k8s.ObjectMeta(name=c.namespace, labels={**labels, **pod_security_labels(CURVINE_ENFORCE)}),
        )
        config = k8s.KubeConfigMap(
            self,
            "config",
            metadata=k8s.ObjectMeta(name=CURVINE_CONFIG_MAP, namespace=c.namespace),
            data={CURVINE_CONFIG_KEY: c.config_toml},
        )
        config.add_dependency(ns)
        in_zone = k8s.VolumeNodeAffinity(
            required=k8s.NodeSelector(
                node_selector_terms=[
                    k8s.NodeSelectorTerm(
                        match_expressions=[
                            k8s.NodeSelectorRequirement(
                                key="topology.kubernetes.io/zone", operator="In", values=[c.availability_zone]
                            )
                        ]
                    )
                ]
            )
        )
        for i, volumes in enumerate(c.master_volumes):
            for kind, volume_id, size in (
                ("meta", volumes.meta_volume_id, c.meta_volume_gib),
                ("journal", volumes.journal_volume_id, c.journal_volume_gib),
            ):
                claim = f"{kind}-{CURVINE_MASTER}-{i}"
                k8s.KubePersistentVolume(
                    self,
                    f"pv-{claim}",
                    metadata=k8s.ObjectMeta(name=f"{c.namespace}-{claim}", labels=labels),
                    spec=k8s.PersistentVolumeSpec(
                        capacity=_storage(size),
                        access_modes=["ReadWriteOnce"],
                        persistent_volume_reclaim_policy="Retain",
                        storage_class_name=CURVINE_STATIC_CLASS,
                        volume_mode="Filesystem",
                        claim_ref=k8s.ObjectReference(namespace=c.namespace, name=claim),
                        csi=k8s.CsiPersistentVolumeSource(
                            driver="ebs.csi.aws.com", volume_handle=volume_id, fs_type="ext4"
                        ),
                        node_affinity=in_zone,
                    ),
                )
        selector = k8s.LabelSelector(match_labels=labels)
        k8s.KubeService(
            self,
            "service",
            metadata=k8s.ObjectMeta(name=CURVINE_MASTER, namespace=c.namespace, labels=labels),
            spec=k8s.ServiceSpec(
                cluster_ip="None",
                publish_not_ready_addresses=True,  # Raft peers must find each other before they are Ready
                selector=labels,
                ports=[
                    k8s.ServicePort(name="rpc", port=c.ports.master_rpc),
                    k8s.ServicePort(name="journal", port=c.ports.journal),
                    k8s.ServicePort(name="web", port=c.ports.master_web),
                ],
            ),
        ).add_dependency(ns)
        volume, mount = _config_volume()
        rpc = c.ports.master_rpc
        master = _server_container(
            "master",
            c,
            resources=c.resources.master,
            hostname_env=[
                _env("POD_NAME", field="metadata.name"),
                _env("CURVINE_MASTER_HOSTNAME", value=curvine_master_host(c.namespace, "$(POD_NAME)")),
            ],
            ports={"rpc": rpc, "journal": c.ports.journal, "web": c.ports.master_web},
            rpc=rpc,
            mounts=[
                mount,
                k8s.VolumeMount(name="meta", mount_path=META_MOUNT),
                k8s.VolumeMount(name="journal", mount_path=JOURNAL_MOUNT),
            ],
            startup=True,
            root=False,
        )
        statefulset = k8s.KubeStatefulSet(
            self,
            "statefulset",
            metadata=k8s.ObjectMeta(name=CURVINE_MASTER, namespace=c.namespace, labels=labels),
            spec=k8s.StatefulSetSpec(
                service_name=CURVINE_MASTER,
                replicas=c.masters,
                pod_management_policy="Parallel",
                selector=selector,
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=labels, annotations={CURVINE_CONFIG_CHECKSUM_ANNOTATION: c.config_checksum}
                    ),
                    spec=k8s.PodSpec(
                        # Non-root although the image defines no user: the server binary needs none, and fsGroup
                        # makes the EBS meta and journal volumes writable (fresh or written by an older root
                        # master: the kubelet changes their group once, OnRootMismatch). No API calls: no token.
                        security_context=pod_security_context(fs_group=True),
                        automount_service_account_token=False,
                        termination_grace_period_seconds=GRACE_SECONDS["master"],
                        # Preempts serving pods on a replaced node: without a master there is no L2 at all.
                        priority_class_name="system-cluster-critical",
                        tolerations=[t.to_k8s() for t in c.tolerations],
                        affinity=k8s.Affinity(
                            # On the worker groups, whose node budget counts a master (sizing.py).
                            node_affinity=_in_groups(c.worker_group_names),
                            pod_anti_affinity=k8s.PodAntiAffinity(
                                required_during_scheduling_ignored_during_execution=[
                                    k8s.PodAffinityTerm(label_selector=selector, topology_key="kubernetes.io/hostname")
                                ]
                            ),
                        ),
                        containers=[master],
                        volumes=[volume],
                    ),
                ),
                volume_claim_templates=[
                    k8s.KubePersistentVolumeClaimProps(
                        metadata=k8s.ObjectMeta(name=kind),
                        spec=k8s.PersistentVolumeClaimSpec(
                            access_modes=["ReadWriteOnce"],
                            storage_class_name=CURVINE_STATIC_CLASS,
                            resources=k8s.VolumeResourceRequirements(requests=_storage(size)),
                        ),
                    )
                    for kind, size in (("meta", c.meta_volume_gib), ("journal", c.journal_volume_gib))
                ],
            ),
        )
        statefulset.add_dependency(config)
        if c.masters > 1:
            # A quorum survives one voluntary disruption. A single master gets no budget: maxUnavailable 0 would
            # block every drain of its node, and the L2 is a cache (serving falls back to prefill meanwhile).
            k8s.KubePodDisruptionBudget(
                self,
                "pdb",
                metadata=k8s.ObjectMeta(name=CURVINE_MASTER, namespace=c.namespace),
                spec=k8s.PodDisruptionBudgetSpec(max_unavailable=int_or_string(1), selector=selector),
            ).add_dependency(ns)


class CurvineWorkerChart(cdk8s.Chart):
    """One worker per node of the worker groups, caching blocks on the node-local NVMe.

    Locality: the master's ``local`` policy writes to the worker whose hostname equals the client's. Workers run on
    the host network and name themselves by the node IP (``status.hostIP``); the CSI's FUSE clients take the same
    value, so a FUSE client writes to its own node's NVMe (through the worker's RPC: short-circuit is off).
    """

    def __init__(self, scope: Construct, id: str, *, cluster: CurvineCluster) -> None:
        """:param cluster: the Curvine L2 these workers store for."""
        super().__init__(scope, id, disable_resource_name_hashes=True)
        c = cluster
        labels = component_labels(CURVINE_WORKER, "worker")
        volume, mount = _config_volume()
        rpc = c.ports.worker_rpc
        worker = _server_container(
            "worker",
            c,
            resources=c.resources.worker,
            hostname_env=[
                _env("NODE_IP", field="status.hostIP"),
                _env("CURVINE_WORKER_HOSTNAME", value="$(NODE_IP)"),
            ],
            ports={"rpc": rpc, "web": c.ports.worker_web},
            rpc=rpc,
            mounts=[mount, k8s.VolumeMount(name="nvme", mount_path=DATA_MOUNT, sub_path=c.data_subpath)],
            startup=False,
            root=True,
        )
        k8s.KubeDaemonSet(
            self,
            "daemonset",
            metadata=k8s.ObjectMeta(name=CURVINE_WORKER, namespace=c.namespace, labels=labels),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=labels),
                # hostNetwork ports clash during a surge: replace in place, one node at a time.
                update_strategy=k8s.DaemonSetUpdateStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDaemonSet(
                        max_unavailable=int_or_string(1), max_surge=int_or_string(0)
                    ),
                ),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=labels, annotations={CURVINE_CONFIG_CHECKSUM_ANNOTATION: c.config_checksum}
                    ),
                    spec=k8s.PodSpec(
                        # Exceptions, each needed: the host network (the worker advertises the node IP that
                        # FUSE clients on other nodes dial) and root, because its data directory is a hostPath
                        # on the node's NVMe owned by root, which fsGroup does not reach. Capabilities are all
                        # dropped: root writes the root-owned directory as its owner. No API calls: no token.
                        security_context=pod_security_context(root=True),
                        automount_service_account_token=False,
                        host_network=True,
                        dns_policy="ClusterFirstWithHostNet",
                        termination_grace_period_seconds=GRACE_SECONDS["worker"],
                        # A node agent: without it this node's L2 writes silently stop being node-local.
                        priority_class_name="system-node-critical",
                        affinity=k8s.Affinity(node_affinity=_in_groups(c.worker_group_names)),
                        tolerations=[t.to_k8s() for t in c.tolerations],
                        containers=[worker],
                        init_containers=[_nvme_check(c)],
                        volumes=[
                            volume,
                            # Directory, never DirectoryOrCreate: a missing mount must not become a root-disk folder.
                            k8s.Volume(
                                name="nvme", host_path=k8s.HostPathVolumeSource(path=c.nvme_mount, type="Directory")
                            ),
                        ],
                    ),
                ),
            ),
        )


def _nvme_check(cluster: CurvineCluster) -> k8s.Container:
    """Init container that fails the worker pod unless ``nvme_mount`` is a filesystem on the instance store
    (``nvme_check.sh``: the mount table and the block devices' models, read without privileges)."""
    return k8s.Container(
        name="check-nvme",
        image=cluster.images.runtime_image,
        image_pull_policy="IfNotPresent",
        command=["/bin/bash", "-c", NVME_CHECK_SCRIPT],
        env=[_env("TARGET", value=NVME_CHECK_TARGET), _env("HOST_PATH", value=cluster.nvme_mount)],
        resources=cluster.resources.sidecar.to_k8s(),
        volume_mounts=[k8s.VolumeMount(name="nvme", mount_path=NVME_CHECK_TARGET, read_only=True)],
        # Reads only world-readable files (the mount table, sysfs): no root needed.
        security_context=container_security_context(),
    )


def _sidecar(
    name: str, image: str, args: list[str], cluster: CurvineCluster, mounts: list[k8s.VolumeMount], *, root: bool
) -> k8s.Container:
    """A CSI sidecar (static Go binary, distroless image): it writes nothing but sockets on its volumes."""
    return k8s.Container(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        args=args,
        resources=cluster.resources.sidecar.to_k8s(),
        volume_mounts=mounts,
        security_context=container_security_context(root=root),
    )


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> k8s.PolicyRule:
    return k8s.PolicyRule(api_groups=groups, resources=resources, verbs=verbs)


Mounted = tuple[k8s.Volume, k8s.VolumeMount]
"""A volume with a container's mount of it: a pod's volumes are those its containers mount."""


def _csi_plugin_env() -> list[k8s.EnvVar]:
    return [
        _env("CSI_ENDPOINT", value=f"unix://{CSI_SOCKET}"),
        _env("NODE_NAME", field="spec.nodeName"),
        _env("NODE_IP", field="status.hostIP"),
        # Without it the driver keeps its state in the namespace "curvine", whatever ours is.
        _env("KUBERNETES_NAMESPACE", field="metadata.namespace"),
        # Embedded: the controller never mounts; the default (standalone) exits without a FUSE service account.
        _env("MOUNT_MODE", value=MOUNT_MODE),
    ]


def _csi_plugin(
    cluster: CurvineCluster,
    *,
    env: list[k8s.EnvVar],
    resources: Resources,
    mounts: list[k8s.VolumeMount],
    security_context: k8s.SecurityContext,
    liveness_probe: k8s.Probe | None = None,
    lifecycle: k8s.Lifecycle | None = None,
) -> k8s.Container:
    """The Curvine CSI driver's container, as the controller and the node plugin run it."""
    return k8s.Container(
        name="csi-plugin",
        image=cluster.images.csi_image,
        image_pull_policy="IfNotPresent",
        command=["/opt/curvine/csi"],
        args=["--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(NODE_NAME)"],
        # curvine-fuse children resolve conf/curvine-cluster.toml from here.
        working_dir=CSI_HOME,
        env=env,
        ports=[k8s.ContainerPort(name="healthz", container_port=CURVINE_CSI_HEALTH_PORT)],
        liveness_probe=liveness_probe,
        lifecycle=lifecycle,
        resources=resources.to_k8s(),
        volume_mounts=mounts,
        security_context=security_context,
    )


def _csi_liveness_probe(cluster: CurvineCluster, socket: k8s.VolumeMount) -> k8s.Container:
    """The sidecar that serves the driver's health on ``healthz``. Root: it connects to the driver's socket, which
    the driver creates as root."""
    return _sidecar(
        "liveness-probe",
        cluster.images.csi_livenessprobe_image,
        ["--csi-address=" + CSI_SOCKET, f"--health-port={CURVINE_CSI_HEALTH_PORT}"],
        cluster,
        [socket],
        root=True,
    )


def _csi_controller_containers(
    cluster: CurvineCluster, *, socket: Mounted, config: Mounted, tmp: Mounted
) -> list[k8s.Container]:
    socket_mount = socket[1]
    return [
        _csi_plugin(
            cluster,
            env=_csi_plugin_env(),
            resources=cluster.resources.csi_controller,
            # CreateVolume runs `curvine-fuse validate-config` against this file.
            # /tmp: scratch for the helper processes the driver runs.
            mounts=[socket_mount, config[1], tmp[1]],
            security_context=container_security_context(root=True),
            liveness_probe=k8s.Probe(
                http_get=k8s.HttpGetAction(path="/healthz", port=int_or_string("healthz")),
                period_seconds=10,
                failure_threshold=5,
            ),
        ),
        _sidecar(
            "csi-provisioner",
            cluster.images.csi_provisioner_image,
            [
                "--csi-address=" + CSI_SOCKET,
                f"--timeout={PROVISIONER_TIMEOUT_S}s",
                "--leader-election",
                "--leader-election-namespace=" + cluster.namespace,
            ],
            cluster,
            [socket_mount],
            root=True,
        ),
        _csi_liveness_probe(cluster, socket_mount),
    ]


def _csi_node_containers(
    cluster: CurvineCluster, *, plugin: Mounted, kubelet: Mounted, registration: Mounted, fuse: Mounted, config: Mounted
) -> list[k8s.Container]:
    plugin_mount = plugin[1]
    return [
        _csi_plugin(
            cluster,
            env=[
                *_csi_plugin_env(),
                # Locality: the FUSE child inherits this, and names itself like this node's worker.
                _env("CURVINE_CLIENT_HOSTNAME", value="$(NODE_IP)"),
            ],
            # The FUSE processes of this node run inside this container.
            resources=cluster.csi_node_plugin_resources,
            mounts=[config[1], plugin_mount, kubelet[1], fuse[1]],
            # The exception of this project: FUSE mounts that the kubelet must see (Bidirectional propagation into
            # /var/lib/kubelet) need a privileged container, and the FUSE processes of the node run inside it. Its root
            # filesystem stays writable: the driver and its FUSE children write /tmp (logs, state_dir) and mount
            # helpers.
            security_context=k8s.SecurityContext(privileged=True, capabilities=k8s.Capabilities(add=["SYS_ADMIN"])),
            # No liveness probe: a restart kills this node's FUSE processes, and the driver's probe answers ok
            # whatever their state (identity.go Probe).
            lifecycle=k8s.Lifecycle(
                pre_stop=k8s.LifecycleHandler(exec=k8s.ExecAction(command=["/bin/sh", "-c", f"rm -f {CSI_SOCKET}"]))
            ),
        ),
        _sidecar(
            "node-driver-registrar",
            cluster.images.csi_node_driver_registrar_image,
            ["--csi-address=" + CSI_SOCKET, f"--kubelet-registration-path={PLUGIN_DIR}/csi.sock"],
            cluster,
            [plugin_mount, registration[1]],
            # Root: it creates its socket in the kubelet's root-owned registration dir.
            root=True,
        ),
        _csi_liveness_probe(cluster, plugin_mount),
    ]


def _host_path(name: str, path: str, type: str, mount_path: str, propagation: str | None = None) -> Mounted:
    return (
        k8s.Volume(name=name, host_path=k8s.HostPathVolumeSource(path=path, type=type)),
        k8s.VolumeMount(name=name, mount_path=mount_path, mount_propagation=propagation),
    )


class CurvineCsiChart(cdk8s.Chart):
    """CSIDriver ``curvine``, controller, node plugin in embedded FUSE mode, least-privilege RBAC.

    Embedded, not standalone: v0.4.1's standalone FUSE pod gets no environment and the image's bundled config, so
    its client hostname is ``localhost`` and no write is node-local. The price: the FUSE processes live in the node
    plugin container, and a restart of that pod breaks the mounts of the serving pods on its node (docs/runbooks.md, FUSE
    restart runbook).
    """

    def __init__(self, scope: Construct, id: str, *, cluster: CurvineCluster) -> None:
        """:param cluster: the Curvine L2 this driver mounts."""
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self._driver()
        self._controller_rbac(cluster.namespace)
        self._node_rbac(cluster.namespace)
        self._controller(cluster)
        self._node_plugin(cluster)

    def _driver(self) -> None:
        k8s.KubeCsiDriver(
            self,
            "driver",
            metadata=k8s.ObjectMeta(name=CURVINE_DRIVER),
            spec=k8s.CsiDriverSpec(
                attach_required=False, pod_info_on_mount=False, volume_lifecycle_modes=["Persistent"]
            ),
        )

    def _controller_rbac(self, namespace: str) -> None:
        self._rbac(
            CURVINE_CSI_CONTROLLER,
            namespace,
            cluster_rules=[
                _rule([""], ["persistentvolumes"], ["get", "list", "watch", "create", "patch", "delete"]),
                _rule([""], ["persistentvolumeclaims"], ["get", "list", "watch", "update"]),
                # The driver advertises PUBLISH_UNPUBLISH_VOLUME: csi-provisioner v5 waits for this informer to sync.
                _rule(["storage.k8s.io"], ["volumeattachments"], ["get", "list", "watch"]),
                _rule(["storage.k8s.io"], ["storageclasses", "csinodes"], ["get", "list", "watch"]),
                _rule([""], ["nodes"], ["get", "list", "watch"]),
                _rule([""], ["events"], ["list", "watch", "create", "update", "patch"]),
            ],
            namespace_rules=[
                _rule(["coordination.k8s.io"], ["leases"], ["get", "watch", "list", "create", "update", "patch"]),
            ],
        )

    def _node_rbac(self, namespace: str) -> None:
        self._rbac(
            CURVINE_CSI_NODE,
            namespace,
            # Embedded mode touches no cluster-scoped object (no PV watcher, that is standalone's).
            cluster_rules=[],
            # No Secrets on purpose: embedded mode would persist its mount state (with FUSE process IDs) in one Secret
            # per node, reload it after a restart and then skip re-mounting because the dead PID is non-zero
            # (mount_state.go, node.go NodePublishVolume). Its load and save failures are only warnings, so without
            # the grant every restart starts clean and the next publish mounts afresh.
            namespace_rules=[],
        )

    def _controller(self, c: CurvineCluster) -> None:
        socket: Mounted = (
            k8s.Volume(name="socket-dir", empty_dir=k8s.EmptyDirVolumeSource()),
            k8s.VolumeMount(name="socket-dir", mount_path="/csi"),
        )
        config = _config_volume(FUSE_CONF_PATH)
        tmp: Mounted = (
            k8s.Volume(
                name="tmp", empty_dir=k8s.EmptyDirVolumeSource(size_limit=quantity(f"{CSI_CONTROLLER_TMP_GIB}Gi"))
            ),
            k8s.VolumeMount(name="tmp", mount_path="/tmp"),
        )
        labels = component_labels(CURVINE_CSI_CONTROLLER, "csi-controller")
        k8s.KubeDeployment(
            self,
            "controller",
            metadata=k8s.ObjectMeta(name=CURVINE_CSI_CONTROLLER, namespace=c.namespace, labels=labels),
            spec=k8s.DeploymentSpec(
                replicas=1,
                selector=k8s.LabelSelector(match_labels=labels),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels),
                    spec=k8s.PodSpec(
                        service_account_name=CURVINE_CSI_CONTROLLER,
                        # The provisioner and leader election call the API; the driver needs in-cluster
                        # credentials to start at all (k8s_client.go NewK8sClient).
                        automount_service_account_token=True,
                        # Root (capabilities dropped): CreateVolume's `curvine-cli fs mkdir` creates the L2
                        # directories owned by this UID with mode 0755 (curvine-cli cmds/fs/common.rs), and the
                        # engines, root without capabilities, must be able to write below them (FUSE mounts with
                        # default_permissions, fuse_conf.rs). The sidecars share the root-owned socket.
                        security_context=pod_security_context(root=True),
                        node_selector={"kubernetes.io/os": "linux"},
                        affinity=k8s.Affinity(node_affinity=off_hyperpod(required=True))
                        if c.controller_off_hyperpod
                        else None,
                        containers=_csi_controller_containers(c, socket=socket, config=config, tmp=tmp),
                        volumes=[volume for volume, _ in (socket, config, tmp)],
                    ),
                ),
            ),
        )

    def _node_plugin(self, c: CurvineCluster) -> None:
        plugin = _host_path("plugin-dir", PLUGIN_DIR, "DirectoryOrCreate", "/csi")
        kubelet = _host_path("kubelet-dir", KUBELET, "Directory", KUBELET, propagation="Bidirectional")
        registration = _host_path("registration-dir", f"{KUBELET}/plugins_registry", "Directory", "/registration")
        fuse = _host_path("fuse-device", "/dev/fuse", "CharDevice", "/dev/fuse")
        config = _config_volume(FUSE_CONF_PATH)
        labels = component_labels(CURVINE_CSI_NODE, "csi-node")
        k8s.KubeDaemonSet(
            self,
            "node",
            metadata=k8s.ObjectMeta(name=CURVINE_CSI_NODE, namespace=c.namespace, labels=labels),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=labels),
                # OnDelete: the FUSE processes live in this pod, so replacing it breaks the L2 mounts of every
                # serving pod on the node; a deploy must never do that by itself (docs/runbooks.md: Curvine FUSE restart).
                update_strategy=k8s.DaemonSetUpdateStrategy(type="OnDelete"),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels),
                    spec=k8s.PodSpec(
                        service_account_name=CURVINE_CSI_NODE,
                        # The driver does not start without in-cluster credentials (k8s_client.go
                        # NewK8sClient, node.go newNodeService), although its account is granted nothing.
                        automount_service_account_token=True,
                        security_context=pod_security_context(root=True),
                        priority_class_name="system-node-critical",
                        host_network=True,
                        dns_policy="ClusterFirstWithHostNet",
                        affinity=k8s.Affinity(node_affinity=_in_groups(c.hyperpod_groups)),
                        tolerations=[k8s.Toleration(operator="Exists")],
                        containers=_csi_node_containers(
                            c, plugin=plugin, kubelet=kubelet, registration=registration, fuse=fuse, config=config
                        ),
                        volumes=[volume for volume, _ in (plugin, kubelet, registration, fuse, config)],
                    ),
                ),
            ),
        )

    def _rbac(
        self, name: str, namespace: str, *, cluster_rules: list[k8s.PolicyRule], namespace_rules: list[k8s.PolicyRule]
    ) -> None:
        """The service account and, for each non-empty rule set, its (Cluster)Role and binding."""
        k8s.KubeServiceAccount(self, f"{name}-sa", metadata=k8s.ObjectMeta(name=name, namespace=namespace))
        subjects = [k8s.Subject(kind="ServiceAccount", name=name, namespace=namespace)]
        if cluster_rules:
            metadata = k8s.ObjectMeta(name=name)
            role_ref = k8s.RoleRef(api_group=RBAC_GROUP, kind="ClusterRole", name=name)
            k8s.KubeClusterRole(self, f"{name}-clusterrole", metadata=metadata, rules=cluster_rules)
            k8s.KubeClusterRoleBinding(
                self, f"{name}-clusterrolebinding", metadata=metadata, role_ref=role_ref, subjects=subjects
            )
        if namespace_rules:
            metadata = k8s.ObjectMeta(name=name, namespace=namespace)
            role_ref = k8s.RoleRef(api_group=RBAC_GROUP, kind="Role", name=name)
            k8s.KubeRole(self, f"{name}-role", metadata=metadata, rules=namespace_rules)
            k8s.KubeRoleBinding(self, f"{name}-rolebinding", metadata=metadata, role_ref=role_ref, subjects=subjects)


class CurvineStorageChart(cdk8s.Chart):
    """The StorageClass serving the Curvine path, the ReadWriteMany L2 claim in the serving namespace, and the janitor
    that keeps the L2 between the eviction watermarks."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: CurvineCluster,
        serving_namespace: str,
        janitor_image: str,
        claim_name: str = DEFAULT_CLAIM_NAME,
        claim_size_gib: int = DEFAULT_CLAIM_SIZE_GIB,
        janitor_interval_seconds: int = DEFAULT_JANITOR_INTERVAL_SECONDS,
    ) -> None:
        """
        :param cluster: the Curvine L2 the claim is served by.
        :param serving_namespace: namespace of the claim and the janitor (the serving pods'); not the Curvine one.
        :param janitor_image: image the janitor runs in, pinned: one with Python 3 that the HyperPod nodes already
            hold (the engine image).
        :param claim_name: the claim serving pods mount. @default ``curvine-l2``
        :param claim_size_gib: nominal size of the claim (Curvine does not enforce it; capacity comes from the
            workers). @default 100
        :param janitor_interval_seconds: time from the start of one janitor run to the next (at least 60).
            @default 600: the L2 overshoots the high watermark by at most ten minutes of writes, and a lost worker's
            unreadable files are gone two runs after its replacement registers
        """
        dns_label(self, "serving_namespace", serving_namespace)
        if serving_namespace == cluster.namespace:
            raise invalid(
                self,
                "serving_namespace",
                f"{serving_namespace!r} is the Curvine namespace; the claim and the janitor belong to the serving "
                "pods' namespace",
            )
        pinned_image(self, "janitor_image", janitor_image)
        dns_label(self, "claim_name", claim_name)
        in_range(self, "claim_size_gib", claim_size_gib, 1)
        in_range(self, "janitor_interval_seconds", janitor_interval_seconds, MIN_JANITOR_INTERVAL_SECONDS)
        super().__init__(scope, id, disable_resource_name_hashes=True)
        k8s.KubeStorageClass(
            self,
            "storageclass",
            metadata=k8s.ObjectMeta(name=CURVINE_STORAGE_CLASS),
            provisioner=CURVINE_DRIVER,
            parameters={
                "master-addrs": cluster.master_addrs,
                "fs-path": cluster.fs_path,
                "path-type": "DirectoryOrCreate",
            },
            reclaim_policy="Retain",
            volume_binding_mode="Immediate",
            # The driver does not implement ControllerExpandVolume: a resize would hang forever.
            allow_volume_expansion=False,
        )
        claim = k8s.KubePersistentVolumeClaim(
            self,
            "claim",
            metadata=k8s.ObjectMeta(name=claim_name, namespace=serving_namespace),
            spec=k8s.PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name=CURVINE_STORAGE_CLASS,
                resources=k8s.VolumeResourceRequirements(requests=_storage(claim_size_gib)),
            ),
        )
        self._janitor(cluster, serving_namespace, claim_name, janitor_image, janitor_interval_seconds).add_dependency(
            claim
        )

    def _janitor(
        self, cluster: CurvineCluster, namespace: str, claim_name: str, image: str, interval_seconds: int
    ) -> k8s.KubeDeployment:
        """One long-running janitor pod that mounts the L2 claim: it evicts the least recently used chunk files above
        the high watermark, deletes files a lost worker left unreadable (asking the masters' web API), and serves its
        counters on ``/metrics`` for the collector (``l2_janitor.py`` says why Curvine cannot do either at v0.4.1).
        A Deployment rather than a CronJob: a finished Job cannot be scraped, so what the janitor freed and whether
        it failed would not reach the alerts. On HyperPod nodes: only they run the CSI node plugin that mounts the
        claim, and they already hold the engine image it runs in."""
        labels = component_labels(CURVINE_JANITOR, CURVINE_JANITOR_COMPONENT)
        source = JANITOR_SCRIPT.read_text()
        script = k8s.KubeConfigMap(
            self,
            "janitor-script",
            metadata=k8s.ObjectMeta(name=CURVINE_JANITOR, namespace=namespace, labels=labels),
            data={JANITOR_SCRIPT.name: source},
        )
        eviction = cluster.eviction
        masters = ",".join(f"http://{host}:{cluster.ports.master_web}" for host in cluster.master_hosts)
        metrics_probe = k8s.HttpGetAction(path="/metrics", port=int_or_string("metrics"))
        janitor = k8s.Container(
            name="janitor",
            image=image,
            image_pull_policy="IfNotPresent",
            command=["python3", f"/janitor/{JANITOR_SCRIPT.name}"],
            args=[
                "--root",
                JANITOR_L2_MOUNT,
                "--capacity-bytes",
                str(cluster.capacity_bytes),
                "--high",
                str(eviction.high_watermark),
                "--low",
                str(eviction.low_watermark),
                "--interval",
                str(interval_seconds),
                "--metrics-port",
                str(CURVINE_JANITOR_METRICS_PORT),
                "--masters",
                masters,
                "--fs-path",
                cluster.fs_path,
                "--workers",
                str(cluster.worker_nodes),
            ],
            ports=[k8s.ContainerPort(name="metrics", container_port=CURVINE_JANITOR_METRICS_PORT)],
            # /metrics answers from its own thread: a run stuck on a hung mount shows in the counters (an alert), it
            # does not restart the pod, which would not unhang the mount.
            readiness_probe=k8s.Probe(http_get=metrics_probe, period_seconds=30),
            liveness_probe=k8s.Probe(http_get=metrics_probe, period_seconds=30, failure_threshold=4, timeout_seconds=5),
            resources=cluster.resources.sidecar.to_k8s(),
            env=[_env("PYTHONDONTWRITEBYTECODE", value="1"), _env("PYTHONUNBUFFERED", value="1")],
            security_context=container_security_context(root=True),
            volume_mounts=[
                k8s.VolumeMount(name="l2", mount_path=JANITOR_L2_MOUNT),
                k8s.VolumeMount(name="script", mount_path="/janitor", read_only=True),
            ],
        )
        deployment = k8s.KubeDeployment(
            self,
            "janitor",
            metadata=k8s.ObjectMeta(name=CURVINE_JANITOR, namespace=namespace, labels=labels),
            spec=k8s.DeploymentSpec(
                replicas=1,
                selector=k8s.LabelSelector(match_labels=labels),
                # Never two at once: two janitors would evict twice as much.
                strategy=k8s.DeploymentStrategy(type="Recreate"),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=labels,
                        annotations={
                            CURVINE_JANITOR_SCRIPT_CHECKSUM_ANNOTATION: hashlib.sha256(source.encode()).hexdigest()
                        },
                    ),
                    spec=k8s.PodSpec(
                        automount_service_account_token=False,
                        # Root without capabilities: the engines (root, their image has no user) own the chunk
                        # files, and only their owner may delete them; the root filesystem stays read-only.
                        security_context=pod_security_context(root=True),
                        affinity=k8s.Affinity(node_affinity=_in_groups(cluster.hyperpod_groups)),
                        tolerations=[t.to_k8s() for t in cluster.tolerations],
                        containers=[janitor],
                        volumes=[
                            k8s.Volume(
                                name="l2",
                                persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(claim_name=claim_name),
                            ),
                            k8s.Volume(name="script", config_map=k8s.ConfigMapVolumeSource(name=CURVINE_JANITOR)),
                        ],
                    ),
                ),
            ),
        )
        deployment.add_dependency(script)
        return deployment
