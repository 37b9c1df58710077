"""The Curvine L2 as four cdk8s charts, each deployed as one manifest in this order: masters (with the static EBS
PersistentVolumes and the cluster config), workers (node-local NVMe), CSI driver, StorageClass + L2 claim."""

from __future__ import annotations

from pathlib import Path

import cdk8s
from constructs import Construct

from kvtiers.k8s_charts.curvine_l2.props import (
    CONF_PATH,
    CONFIG_MAP,
    CSI_CONTROLLER,
    CSI_HOME,
    CSI_NODE,
    DATA_MOUNT,
    DRIVER,
    FUSE_CONF_PATH,
    GRACE_SECONDS,
    JOURNAL_MOUNT,
    MASTER,
    META_MOUNT,
    MOUNT_MODE,
    PROVISIONER_TIMEOUT_S,
    SERVER_BINARY,
    SERVER_HOME,
    STATIC_CLASS,
    STORAGE_CLASS,
    WORKER,
    CurvineProps,
)
from kvtiers.k8s_charts.names import HYPERPOD_INSTANCE_GROUP, component_labels
from kvtiers.k8s_charts.namespaces import pod_security_labels
from kvtiers.k8s_charts.security import container_context, pod_context

CURVINE_ENFORCE = "privileged"
"""Pod Security level enforced in the Curvine namespace: the CSI node plugin is privileged (FUSE mounts with
bidirectional propagation) and the FUSE processes the driver starts run inside it; workers use the host network and
a hostPath. Masters and the CSI controller meet restricted, which warn/audit report for every pod."""
TMP_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}

KUBELET = "/var/lib/kubelet"
PLUGIN_DIR = f"{KUBELET}/plugins/{DRIVER}"
CSI_SOCKET = "/csi/csi.sock"
HEALTH_PORT = 9909


def api_object(chart: Construct, id: str, api_version: str, kind: str, metadata: dict, body: dict) -> cdk8s.ApiObject:
    obj = cdk8s.ApiObject(chart, id, api_version=api_version, kind=kind, metadata=cdk8s.ApiObjectMetadata(**metadata))
    for key, value in body.items():
        obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj


def _env(name: str, field: str | None = None, value: str | None = None) -> dict:
    if field:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}}
    return {"name": name, "value": value}


def _in_groups(groups: tuple[str, ...]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HYPERPOD_INSTANCE_GROUP, "operator": "In", "values": list(groups)}]}
                ]
            }
        }
    }


def _config_volume(path: str = CONF_PATH) -> tuple[dict, dict]:
    """The cluster ConfigMap as a volume and its mount as the single file ``path``."""
    return (
        {"name": "config", "configMap": {"name": CONFIG_MAP}},
        {"name": "config", "mountPath": path, "subPath": "curvine-cluster.toml", "readOnly": True},
    )


def _server_container(
    service: str,
    props: CurvineProps,
    *,
    hostname_env: list[dict],
    ports: dict[str, int],
    rpc: int,
    mounts: list[dict],
    startup: bool,
    root: bool,
) -> dict:
    """A ``curvine-server`` container (master or worker): config file, bind address, TCP probes on the RPC port.

    The server binary is the container's command, not the image's entrypoint script: the script keeps bash as PID 1
    without a signal handler and tees the log into an unrotated file, so SIGTERM never reached the server. The
    binary handles SIGTERM itself (graceful shutdown) and logs to stdout.
    """
    container = {
        "name": service,
        "image": props.images["runtime_image"],
        "imagePullPolicy": "IfNotPresent",
        "command": [SERVER_BINARY],
        "args": ["--service", service, "--conf", CONF_PATH],
        "workingDir": SERVER_HOME,
        "env": [*hostname_env, _env("ORPC_BIND_HOSTNAME", value="0.0.0.0")],
        "ports": [{"name": name, "containerPort": port} for name, port in ports.items()],
        "readinessProbe": {"tcpSocket": {"port": rpc}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": rpc}, "periodSeconds": 10, "failureThreshold": 6},
        "resources": props.resources[service].to_k8s(),
        "volumeMounts": mounts,
        # The server writes only its configured directories (meta/journal or data, all volumes) and logs to
        # stdout (LogConf default, logger.rs): the image's root filesystem stays read-only.
        "securityContext": container_context(root=root),
    }
    if startup:
        # A master replays its journal before it listens: give it up to 15 minutes.
        container["startupProbe"] = {"tcpSocket": {"port": rpc}, "periodSeconds": 10, "failureThreshold": 90}
    return container


class CurvineMasterChart(cdk8s.Chart):
    """Namespace, cluster config, static PersistentVolumes on the CDK journal volumes, masters, PDB."""

    def __init__(self, scope: Construct, id: str, *, props: CurvineProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        labels = component_labels(MASTER, "master")
        ns = api_object(
            self,
            "namespace",
            "v1",
            "Namespace",
            {"name": p.namespace, "labels": {**labels, **pod_security_labels(CURVINE_ENFORCE)}},
            {},
        )
        config = api_object(
            self,
            "config",
            "v1",
            "ConfigMap",
            {"name": CONFIG_MAP, "namespace": p.namespace},
            {"data": {"curvine-cluster.toml": p.config_toml}},
        )
        config.add_dependency(ns)
        for i, (meta_id, journal_id) in enumerate(p.journal_volume_ids):
            for kind, volume_id, size in (
                ("meta", meta_id, p.meta_size_gib),
                ("journal", journal_id, p.journal_size_gib),
            ):
                claim = f"{kind}-{MASTER}-{i}"
                api_object(
                    self,
                    f"pv-{claim}",
                    "v1",
                    "PersistentVolume",
                    {"name": f"{p.namespace}-{claim}", "labels": labels},
                    {
                        "spec": {
                            "capacity": {"storage": f"{size}Gi"},
                            "accessModes": ["ReadWriteOnce"],
                            "persistentVolumeReclaimPolicy": "Retain",
                            "storageClassName": STATIC_CLASS,
                            "volumeMode": "Filesystem",
                            "claimRef": {"namespace": p.namespace, "name": claim},
                            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": volume_id, "fsType": "ext4"},
                            "nodeAffinity": {
                                "required": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {
                                                    "key": "topology.kubernetes.io/zone",
                                                    "operator": "In",
                                                    "values": [p.availability_zone],
                                                }
                                            ]
                                        }
                                    ]
                                }
                            },
                        }
                    },
                )
        api_object(
            self,
            "service",
            "v1",
            "Service",
            {"name": MASTER, "namespace": p.namespace, "labels": labels},
            {
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,  # Raft peers must find each other before they are Ready
                    "selector": labels,
                    "ports": [
                        {"name": "rpc", "port": p.ports["master_rpc"]},
                        {"name": "journal", "port": p.ports["journal"]},
                        {"name": "web", "port": p.ports["master_web"]},
                    ],
                }
            },
        ).add_dependency(ns)
        volume, mount = _config_volume()
        rpc = p.ports["master_rpc"]
        statefulset = api_object(
            self,
            "statefulset",
            "apps/v1",
            "StatefulSet",
            {"name": MASTER, "namespace": p.namespace, "labels": labels},
            {
                "spec": {
                    "serviceName": MASTER,
                    "replicas": p.masters,
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels, "annotations": {"kvtiers.io/config-sha256": p.config_checksum}},
                        "spec": {
                            # Non-root although the image defines no user: the server binary needs none, and fsGroup
                            # makes the EBS meta and journal volumes writable (fresh or written by an older root
                            # master: the kubelet changes their group once, OnRootMismatch). No API calls: no token.
                            "securityContext": pod_context(fs_group=True),
                            "automountServiceAccountToken": False,
                            "terminationGracePeriodSeconds": GRACE_SECONDS["master"],
                            # Preempts serving pods on a replaced node: without a master there is no L2 at all.
                            "priorityClassName": "system-cluster-critical",
                            "tolerations": list(p.tolerations),
                            "affinity": {
                                # On the worker groups, whose node budget counts a master (sizing.py).
                                **_in_groups(p.worker_groups),
                                "podAntiAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": [
                                        {
                                            "labelSelector": {"matchLabels": labels},
                                            "topologyKey": "kubernetes.io/hostname",
                                        }
                                    ]
                                },
                            },
                            "containers": [
                                _server_container(
                                    "master",
                                    p,
                                    hostname_env=[
                                        _env("POD_NAME", field="metadata.name"),
                                        _env(
                                            "CURVINE_MASTER_HOSTNAME",
                                            value=f"$(POD_NAME).{MASTER}.{p.namespace}.svc.cluster.local",
                                        ),
                                    ],
                                    ports={"rpc": rpc, "journal": p.ports["journal"], "web": p.ports["master_web"]},
                                    rpc=rpc,
                                    mounts=[
                                        mount,
                                        {"name": "meta", "mountPath": META_MOUNT},
                                        {"name": "journal", "mountPath": JOURNAL_MOUNT},
                                    ],
                                    startup=True,
                                    root=False,
                                )
                            ],
                            "volumes": [volume],
                        },
                    },
                    "volumeClaimTemplates": [
                        {
                            "metadata": {"name": kind},
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "storageClassName": STATIC_CLASS,
                                "resources": {"requests": {"storage": f"{size}Gi"}},
                            },
                        }
                        for kind, size in (("meta", p.meta_size_gib), ("journal", p.journal_size_gib))
                    ],
                }
            },
        )
        statefulset.add_dependency(config)
        if p.masters > 1:
            # A quorum survives one voluntary disruption. A single master gets no budget: maxUnavailable 0 would
            # block every drain of its node, and the L2 is a cache (serving falls back to prefill meanwhile).
            api_object(
                self,
                "pdb",
                "policy/v1",
                "PodDisruptionBudget",
                {"name": MASTER, "namespace": p.namespace},
                {"spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
            ).add_dependency(ns)


class CurvineWorkerChart(cdk8s.Chart):
    """One worker per node of the worker groups, caching blocks on the node-local NVMe.

    Locality: the master's ``local`` policy writes to the worker whose hostname equals the client's. Workers run on
    the host network and name themselves by the node IP (``status.hostIP``); the CSI's FUSE clients take the same
    value, so a FUSE client writes to its own node's NVMe (through the worker's RPC: short-circuit is off).
    """

    def __init__(self, scope: Construct, id: str, *, props: CurvineProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        labels = component_labels(WORKER, "worker")
        volume, mount = _config_volume()
        rpc = p.ports["worker_rpc"]
        api_object(
            self,
            "daemonset",
            "apps/v1",
            "DaemonSet",
            {"name": WORKER, "namespace": p.namespace, "labels": labels},
            {
                "spec": {
                    "selector": {"matchLabels": labels},
                    # hostNetwork ports clash during a surge: replace in place, one node at a time.
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                    "template": {
                        "metadata": {"labels": labels, "annotations": {"kvtiers.io/config-sha256": p.config_checksum}},
                        "spec": {
                            # Exceptions, each needed: the host network (the worker advertises the node IP that
                            # FUSE clients on other nodes dial) and root, because its data directory is a hostPath
                            # on the node's NVMe owned by root, which fsGroup does not reach. Capabilities are all
                            # dropped: root writes the root-owned directory as its owner. No API calls: no token.
                            "securityContext": pod_context(root=True),
                            "automountServiceAccountToken": False,
                            "hostNetwork": True,
                            "dnsPolicy": "ClusterFirstWithHostNet",
                            "terminationGracePeriodSeconds": GRACE_SECONDS["worker"],
                            # A node agent: without it this node's L2 writes silently stop being node-local.
                            "priorityClassName": "system-node-critical",
                            "affinity": _in_groups(p.worker_groups),
                            "tolerations": list(p.tolerations),
                            "containers": [
                                _server_container(
                                    "worker",
                                    p,
                                    hostname_env=[
                                        _env("NODE_IP", field="status.hostIP"),
                                        _env("CURVINE_WORKER_HOSTNAME", value="$(NODE_IP)"),
                                    ],
                                    ports={"rpc": rpc, "web": p.ports["worker_web"]},
                                    rpc=rpc,
                                    mounts=[
                                        mount,
                                        {"name": "nvme", "mountPath": DATA_MOUNT, "subPath": p.data_subpath},
                                    ],
                                    startup=False,
                                    root=True,
                                )
                            ],
                            "initContainers": [_nvme_check(p)],
                            "volumes": [
                                volume,
                                # Directory, never DirectoryOrCreate: a missing mount must not become a root-disk folder.
                                {"name": "nvme", "hostPath": {"path": p.nvme_mount, "type": "Directory"}},
                            ],
                        },
                    },
                }
            },
        )


NVME_CHECK_SCRIPT = (Path(__file__).parent / "nvme_check.sh").read_text()
JANITOR = "curvine-l2-janitor"
JANITOR_SCRIPT = Path(__file__).parent / "l2_janitor.py"
JANITOR_L2_MOUNT = "/l2"
NVME_CHECK_TARGET = "/host/nvme"


def _nvme_check(props: CurvineProps) -> dict:
    """Init container that fails the worker pod unless ``nvme_mount`` is a filesystem on the instance store
    (``nvme_check.sh``: the mount table and the block devices' models, read without privileges)."""
    return {
        "name": "check-nvme",
        "image": props.images["runtime_image"],
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", "-c", NVME_CHECK_SCRIPT],
        "env": [_env("TARGET", value=NVME_CHECK_TARGET), _env("HOST_PATH", value=props.nvme_mount)],
        "resources": props.resources["sidecar"].to_k8s(),
        "volumeMounts": [{"name": "nvme", "mountPath": NVME_CHECK_TARGET, "readOnly": True}],
        # Reads only world-readable files (the mount table, sysfs): no root needed.
        "securityContext": container_context(),
    }


def _sidecar(
    name: str, image: str, args: list[str], props: CurvineProps, mounts: list[dict], *, root: bool = False
) -> dict:
    """A CSI sidecar (static Go binary, distroless image): it writes nothing but sockets on its volumes."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "resources": props.resources["sidecar"].to_k8s(),
        "volumeMounts": mounts,
        "securityContext": container_context(root=root),
    }


class CurvineCsiChart(cdk8s.Chart):
    """CSIDriver ``curvine``, controller, node plugin in embedded FUSE mode, least-privilege RBAC.

    Embedded, not standalone: v0.4.1's standalone FUSE pod gets no environment and the image's bundled config, so
    its client hostname is ``localhost`` and no write is node-local. The price: the FUSE processes live in the node
    plugin container, and a restart of that pod breaks the mounts of the serving pods on its node (README, FUSE
    restart runbook).
    """

    def __init__(self, scope: Construct, id: str, *, props: CurvineProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        ns = p.namespace
        api_object(
            self,
            "driver",
            "storage.k8s.io/v1",
            "CSIDriver",
            {"name": DRIVER},
            {"spec": {"attachRequired": False, "podInfoOnMount": False, "volumeLifecycleModes": ["Persistent"]}},
        )
        self._rbac(
            CSI_CONTROLLER,
            cluster_rules=[
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "delete"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumeclaims"],
                    "verbs": ["get", "list", "watch", "update"],
                },
                # The driver advertises PUBLISH_UNPUBLISH_VOLUME: csi-provisioner v5 waits for this informer to sync.
                {
                    "apiGroups": ["storage.k8s.io"],
                    "resources": ["volumeattachments"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["storage.k8s.io"],
                    "resources": ["storageclasses", "csinodes"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch", "create", "update", "patch"]},
            ],
            namespace_rules=[
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "watch", "list", "create", "update", "patch"],
                },
            ],
            props=p,
        )
        self._rbac(
            CSI_NODE,
            # Embedded mode touches no cluster-scoped object (no PV watcher, that is standalone's).
            cluster_rules=[],
            # No Secrets on purpose: embedded mode would persist its mount state (with FUSE process IDs) in one Secret
            # per node, reload it after a restart and then skip re-mounting because the dead PID is non-zero
            # (mount_state.go, node.go NodePublishVolume). Its load and save failures are only warnings, so without
            # the grant every restart starts clean and the next publish mounts afresh.
            namespace_rules=[],
            props=p,
        )
        socket_mount = {"name": "socket-dir", "mountPath": "/csi"}
        plugin_env = [
            _env("CSI_ENDPOINT", value=f"unix://{CSI_SOCKET}"),
            _env("NODE_NAME", field="spec.nodeName"),
            _env("NODE_IP", field="status.hostIP"),
            # Without it the driver keeps its state in the namespace "curvine", whatever ours is.
            _env("KUBERNETES_NAMESPACE", field="metadata.namespace"),
            # Embedded: the controller never mounts; the default (standalone) exits without a FUSE service account.
            _env("MOUNT_MODE", value=MOUNT_MODE),
        ]
        health = ["--csi-address=" + CSI_SOCKET, f"--health-port={HEALTH_PORT}"]
        config_volume, config_mount = _config_volume(FUSE_CONF_PATH)
        controller_labels = component_labels(CSI_CONTROLLER, "csi-controller")
        api_object(
            self,
            "controller",
            "apps/v1",
            "Deployment",
            {"name": CSI_CONTROLLER, "namespace": ns, "labels": controller_labels},
            {
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": controller_labels},
                    "template": {
                        "metadata": {"labels": controller_labels},
                        "spec": {
                            "serviceAccountName": CSI_CONTROLLER,
                            # The provisioner and leader election call the API; the driver needs in-cluster
                            # credentials to start at all (k8s_client.go NewK8sClient).
                            "automountServiceAccountToken": True,
                            # Root (capabilities dropped): CreateVolume's `curvine-cli fs mkdir` creates the L2
                            # directories owned by this UID with mode 0755 (curvine-cli cmds/fs/common.rs), and the
                            # engines, root without capabilities, must be able to write below them (FUSE mounts with
                            # default_permissions, fuse_conf.rs). The sidecars share the root-owned socket.
                            "securityContext": pod_context(root=True),
                            "nodeSelector": {"kubernetes.io/os": "linux"},
                            "containers": [
                                {
                                    "name": "csi-plugin",
                                    "image": p.images["csi_image"],
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["/opt/curvine/csi"],
                                    "args": ["--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(NODE_NAME)"],
                                    "workingDir": CSI_HOME,
                                    "env": plugin_env,
                                    "ports": [{"name": "healthz", "containerPort": HEALTH_PORT}],
                                    "livenessProbe": {
                                        "httpGet": {"path": "/healthz", "port": "healthz"},
                                        "periodSeconds": 10,
                                        "failureThreshold": 5,
                                    },
                                    "resources": p.resources["csi_controller"].to_k8s(),
                                    # CreateVolume runs `curvine-fuse validate-config` against this file.
                                    "volumeMounts": [socket_mount, config_mount, TMP_MOUNT],
                                    # /tmp: scratch for the helper processes the driver runs.
                                    "securityContext": container_context(root=True),
                                },
                                _sidecar(
                                    "csi-provisioner",
                                    p.images["csi_provisioner_image"],
                                    [
                                        "--csi-address=" + CSI_SOCKET,
                                        f"--timeout={PROVISIONER_TIMEOUT_S}s",
                                        "--leader-election",
                                        "--leader-election-namespace=" + ns,
                                    ],
                                    p,
                                    [socket_mount],
                                    root=True,
                                ),
                                _sidecar(
                                    "liveness-probe",
                                    p.images["csi_livenessprobe_image"],
                                    health,
                                    p,
                                    [socket_mount],
                                    root=True,
                                ),
                            ],
                            "volumes": [{"name": "socket-dir", "emptyDir": {}}, config_volume, TMP_VOLUME],
                        },
                    },
                }
            },
        )
        node_labels = component_labels(CSI_NODE, "csi-node")
        plugin_mount = {"name": "plugin-dir", "mountPath": "/csi"}
        api_object(
            self,
            "node",
            "apps/v1",
            "DaemonSet",
            {"name": CSI_NODE, "namespace": ns, "labels": node_labels},
            {
                "spec": {
                    "selector": {"matchLabels": node_labels},
                    # OnDelete: the FUSE processes live in this pod, so replacing it breaks the L2 mounts of every
                    # serving pod on the node; a deploy must never do that by itself (README: Curvine FUSE restart).
                    "updateStrategy": {"type": "OnDelete"},
                    "template": {
                        "metadata": {"labels": node_labels},
                        "spec": {
                            "serviceAccountName": CSI_NODE,
                            # The driver does not start without in-cluster credentials (k8s_client.go
                            # NewK8sClient, node.go newNodeService), although its account is granted nothing.
                            "automountServiceAccountToken": True,
                            "securityContext": pod_context(root=True),
                            "priorityClassName": "system-node-critical",
                            "hostNetwork": True,
                            "dnsPolicy": "ClusterFirstWithHostNet",
                            "affinity": _in_groups(p.hyperpod_groups),
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [
                                {
                                    "name": "csi-plugin",
                                    "image": p.images["csi_image"],
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["/opt/curvine/csi"],
                                    "args": ["--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(NODE_NAME)"],
                                    # curvine-fuse children resolve conf/curvine-cluster.toml from here.
                                    "workingDir": CSI_HOME,
                                    "env": [
                                        *plugin_env,
                                        # Locality: the FUSE child inherits this, and names itself like this node's worker.
                                        _env("CURVINE_CLIENT_HOSTNAME", value="$(NODE_IP)"),
                                    ],
                                    # The exception of this project: FUSE mounts that the kubelet must see
                                    # (Bidirectional propagation into /var/lib/kubelet) need a privileged container, and
                                    # the FUSE processes of the node run inside it. Its root filesystem stays writable:
                                    # the driver and its FUSE children write /tmp (logs, state_dir) and mount helpers.
                                    "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                                    "ports": [{"name": "healthz", "containerPort": HEALTH_PORT}],
                                    # No liveness probe: a restart kills this node's FUSE processes, and the driver's
                                    # probe answers ok whatever their state (identity.go Probe).
                                    "lifecycle": {
                                        "preStop": {"exec": {"command": ["/bin/sh", "-c", f"rm -f {CSI_SOCKET}"]}}
                                    },
                                    # The FUSE processes of this node run inside this container.
                                    "resources": p.csi_node_plugin_resources.to_k8s(),
                                    "volumeMounts": [
                                        config_mount,
                                        plugin_mount,
                                        {
                                            "name": "kubelet-dir",
                                            "mountPath": KUBELET,
                                            "mountPropagation": "Bidirectional",
                                        },
                                        {"name": "fuse-device", "mountPath": "/dev/fuse"},
                                    ],
                                },
                                _sidecar(
                                    "node-driver-registrar",
                                    p.images["csi_node_driver_registrar_image"],
                                    [
                                        "--csi-address=" + CSI_SOCKET,
                                        f"--kubelet-registration-path={PLUGIN_DIR}/csi.sock",
                                    ],
                                    p,
                                    [plugin_mount, {"name": "registration-dir", "mountPath": "/registration"}],
                                    # Root: it creates its socket in the kubelet's root-owned registration dir.
                                    root=True,
                                ),
                                # Root: it connects to the driver's socket, which the privileged plugin creates as root.
                                _sidecar(
                                    "liveness-probe",
                                    p.images["csi_livenessprobe_image"],
                                    health,
                                    p,
                                    [plugin_mount],
                                    root=True,
                                ),
                            ],
                            "volumes": [
                                {"name": "plugin-dir", "hostPath": {"path": PLUGIN_DIR, "type": "DirectoryOrCreate"}},
                                {"name": "kubelet-dir", "hostPath": {"path": KUBELET, "type": "Directory"}},
                                {
                                    "name": "registration-dir",
                                    "hostPath": {"path": f"{KUBELET}/plugins_registry", "type": "Directory"},
                                },
                                {"name": "fuse-device", "hostPath": {"path": "/dev/fuse", "type": "CharDevice"}},
                                config_volume,
                            ],
                        },
                    },
                }
            },
        )

    def _rbac(self, name: str, *, cluster_rules: list[dict], namespace_rules: list[dict], props: CurvineProps) -> None:
        """The service account and, for each non-empty rule set, its (Cluster)Role and binding."""
        ns = props.namespace
        api_object(self, f"{name}-sa", "v1", "ServiceAccount", {"name": name, "namespace": ns}, {})
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        for kind, rules, metadata in (
            ("ClusterRole", cluster_rules, {"name": name}),
            ("Role", namespace_rules, {"name": name, "namespace": ns}),
        ):
            if not rules:
                continue
            prefix = kind.lower()
            api_object(self, f"{name}-{prefix}", "rbac.authorization.k8s.io/v1", kind, metadata, {"rules": rules})
            api_object(
                self,
                f"{name}-{prefix}binding",
                "rbac.authorization.k8s.io/v1",
                f"{kind}Binding",
                metadata,
                {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}, "subjects": subject},
            )


class CurvineStorageChart(cdk8s.Chart):
    """The StorageClass serving the Curvine path and the ReadWriteMany L2 claim in the serving namespace."""

    def __init__(self, scope: Construct, id: str, *, props: CurvineProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        api_object(
            self,
            "storageclass",
            "storage.k8s.io/v1",
            "StorageClass",
            {"name": STORAGE_CLASS},
            {
                "provisioner": DRIVER,
                "parameters": {"master-addrs": p.master_addrs, "fs-path": p.fs_path, "path-type": "DirectoryOrCreate"},
                "reclaimPolicy": "Retain",
                "volumeBindingMode": "Immediate",
                # The driver does not implement ControllerExpandVolume: a resize would hang forever.
                "allowVolumeExpansion": False,
            },
        )
        claim = api_object(
            self,
            "claim",
            "v1",
            "PersistentVolumeClaim",
            {"name": p.claim_name, "namespace": p.serving_namespace},
            {
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": STORAGE_CLASS,
                    "resources": {"requests": {"storage": f"{p.claim_size_gib}Gi"}},
                }
            },
        )
        self._janitor(p).add_dependency(claim)

    def _janitor(self, p: CurvineProps) -> cdk8s.ApiObject:
        """A CronJob that mounts the L2 claim and deletes the oldest chunk files above the high watermark
        (``l2_janitor.py`` says why Curvine cannot do it at v0.4.1). On HyperPod nodes: only they run the CSI node
        plugin that mounts the claim, and they already hold the engine image it runs in."""
        ns = p.serving_namespace
        labels = component_labels(JANITOR, "l2-janitor")
        script = api_object(
            self,
            "janitor-script",
            "v1",
            "ConfigMap",
            {"name": JANITOR, "namespace": ns, "labels": labels},
            {"data": {JANITOR_SCRIPT.name: JANITOR_SCRIPT.read_text()}},
        )
        job_pod = {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                # Root without capabilities: the engines (root, their image has no user) own the chunk files, and
                # only their owner may delete them; the root filesystem stays read-only.
                "securityContext": pod_context(root=True),
                "affinity": _in_groups(p.hyperpod_groups),
                "tolerations": list(p.tolerations),
                "containers": [
                    {
                        "name": "janitor",
                        "image": p.janitor_image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [
                            "python3",
                            f"/janitor/{JANITOR_SCRIPT.name}",
                            JANITOR_L2_MOUNT,
                            str(p.l2_capacity_bytes),
                            str(p.eviction_high),
                            str(p.eviction_low),
                        ],
                        "resources": p.resources["sidecar"].to_k8s(),
                        "env": [_env("PYTHONDONTWRITEBYTECODE", value="1")],
                        "securityContext": container_context(root=True),
                        "volumeMounts": [
                            {"name": "l2", "mountPath": JANITOR_L2_MOUNT},
                            {"name": "script", "mountPath": "/janitor", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "l2", "persistentVolumeClaim": {"claimName": p.claim_name}},
                    {"name": "script", "configMap": {"name": JANITOR}},
                ],
            },
        }
        cronjob = api_object(
            self,
            "janitor",
            "batch/v1",
            "CronJob",
            {"name": JANITOR, "namespace": ns, "labels": labels},
            {
                "spec": {
                    "schedule": p.janitor_schedule,
                    # One at a time: two janitors would delete twice as much.
                    "concurrencyPolicy": "Forbid",
                    "successfulJobsHistoryLimit": 1,
                    "failedJobsHistoryLimit": 3,
                    # A run stuck on a dead mount must not block the next ones (Forbid waits for it).
                    "startingDeadlineSeconds": 300,
                    "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": 1800, "template": job_pod}},
                }
            },
        )
        cronjob.add_dependency(script)
        return cronjob
