"""The shared description of one Curvine L2 (:class:`CurvineCluster`) and the facts derived from it.

Everything the four charts and ``curvine-cluster.toml`` share (ports, paths, master addresses, the cluster config) is
computed here once, so the objects and the config file cannot disagree. Each value object checks its rules when it
is built; the error names the class and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import tomli_w
from cdk8s_plus_33 import k8s

from kvtiers.catalog import curvine_defaults as defaults
from kvtiers.catalog.curvine_defaults import EvictionPolicy
from kvtiers.catalog.platform_defaults import JOURNAL_VOLUME_GIB, META_VOLUME_GIB
from kvtiers.checks import absolute_path, dns_label, in_range, invalid, one_of, pinned_image
from kvtiers.k8s_charts.names import curvine_master_host, curvine_master_pod
from kvtiers.k8s_charts.security import quantity
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.placement import millicores

GB = 1000**3
"""Curvine's capacity unit (``[SSD:<n>GB]``, ``dir_reserved``): decimal gigabytes."""
CONF_PATH = "/app/curvine/conf/curvine-cluster.toml"
META_MOUNT = "/opt/curvine/data/meta"
JOURNAL_MOUNT = "/opt/curvine/data/journal"
DATA_MOUNT = "/data/curvine"
SERVER_HOME = "/app/curvine"
"""``CURVINE_HOME`` of the runtime image (``curvine-docker/deploy/Dockerfile_rocky9``)."""
SERVER_BINARY = f"{SERVER_HOME}/lib/curvine-server"
"""Run directly as PID 1: it handles SIGTERM itself (``rpc_server.rs``), the image's entrypoint script does not."""
CSI_HOME = "/opt/curvine"
"""``WORKDIR`` of the CSI image (``curvine-csi/Dockerfile``): curvine-fuse resolves its default config from here."""
FUSE_CONF_PATH = f"{CSI_HOME}/conf/curvine-cluster.toml"
"""Where curvine-fuse (default ``--conf conf/curvine-cluster.toml``, ``mount_args.rs``) and the CSI's
``validate-config`` (``fuse_validate.go``) read the cluster config inside the CSI containers."""
MOUNT_MODE = "embedded"
"""CSI mount mode of both CSI workloads (``MOUNT_MODE``, ``curvine-csi/pkg/csi/driver.go``): the FUSE process is a
child of the node plugin and inherits its environment (the client hostname) and working directory (the config)."""
PROVISIONER_TIMEOUT_S = 300
"""csi-provisioner ``--timeout``. The default 10 s cancels the first CreateVolume, which runs ``curvine-cli`` up to
four times per missing path with 30 s command timeouts (``controller.go``, ``utils.go``); upstream's own
manifest uses 300 s (``curvine-csi/deploy/deployment.yaml``)."""

FUSE_LOG_FILE_MIB = 64
FUSE_LOG_OLD_FILES = 4
FUSE_LOG_BOUND_MIB = (FUSE_LOG_OLD_FILES + 1) * FUSE_LOG_FILE_MIB
FUSE_LOG: dict[str, str | int] = {
    "level": "INFO",
    "log_dir": "/tmp",
    "file_name": "curvine-fuse",
    "max_file_size_mb": FUSE_LOG_FILE_MIB,
    "max_log_files": FUSE_LOG_OLD_FILES,
}
"""``[fuse.log]``: curvine-fuse initialises its logger from this section only (``curvine-fuse/src/cli/mount_run.rs``
``Logger::init(cluster_conf.fuse.log)``). Without it the FUSE client logs to stdout, which the CSI driver redirects
into ``/tmp/curvine-fuse-<key>.log`` and never rotates (``curvine-csi/pkg/csi/fuse_manager.go``). With a directory it
writes ``<log_dir>/<file_name>.log`` through rolling-file (``crates/core/runtime/src/common/logger.rs``), rotated at
``max_file_size_mb`` and keeping ``max_log_files`` old files: at most 5 x 64 MiB = 320 MiB per node in the CSI node
plugin's writable layer, where ``/tmp`` exists (the directory must exist: the appender panics without it). Not an
emptyDir with a size limit: exceeding it evicts the pod, and with it every FUSE mount of the node."""

GRACE_SECONDS = {"master": 120, "worker": 60}
"""terminationGracePeriodSeconds: on SIGTERM the server stops its RPC loop and runs its shutdown hooks
(``rpc_server.rs``), the master closing its RocksDB metadata and Raft journal; the image's own stop action waits
15 s before SIGKILL (``entrypoint.sh``). Generous margins: a hard-killed master replays its journal on start."""

MASTER_COUNTS = (1, 3, 5)
"""Raft group sizes: an odd quorum, fixed at install (Curvine cannot resize the journal group in place)."""
MAX_GP3_GIB = 16384
"""Largest gp3 volume (the master's meta and journal volumes are gp3)."""

Network = Literal["host", "pod"]

_CPU = re.compile(r"^\d+(\.\d+)?m?$")
_BLOCK_SIZE = re.compile(r"^\d+(KB|MB|GB)$")


@dataclass(frozen=True, kw_only=True)
class CurvinePorts:
    """Every Curvine listener's port, set explicitly because Curvine's code and docs disagree on the web-port
    defaults. Ports must be distinct TCP ports.

    :param master_rpc: master RPC. @default 8995
    :param journal: master Raft journal. @default 8996
    :param worker_rpc: worker RPC (host network). @default 8997
    :param master_web: master web API and metrics. @default 9000
    :param worker_web: worker web and metrics (host network). @default 9001
    :param fuse_web: FUSE client metrics (host network, in the CSI node plugin). @default 9002
    """

    master_rpc: int = defaults.MASTER_RPC_PORT
    journal: int = defaults.JOURNAL_PORT
    worker_rpc: int = defaults.WORKER_RPC_PORT
    master_web: int = defaults.MASTER_WEB_PORT
    worker_web: int = defaults.WORKER_WEB_PORT
    fuse_web: int = defaults.FUSE_WEB_PORT

    def __post_init__(self) -> None:
        owners: dict[int, str] = {}
        for name, port in self.by_name().items():
            in_range(self, name, port, 1, 65535)
            if port in owners:
                raise invalid(self, name, f"{port} is also {owners[port]}'s port; every port must be distinct")
            owners[port] = name

    def by_name(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class CurvineImages:
    """Container images, each pinned by tag or digest.

    :param runtime_image: masters, workers and the worker's NVMe check. @default ``ghcr.io/curvineio/curvine:v0.4.1``
    :param csi_image: the CSI plugin (controller and node). @default ``ghcr.io/curvineio/curvine-csi:v0.4.1``
    :param csi_provisioner_image: @default ``registry.k8s.io/sig-storage/csi-provisioner:v5.2.0``
    :param csi_node_driver_registrar_image: @default ``registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0``
    :param csi_livenessprobe_image: @default ``registry.k8s.io/sig-storage/livenessprobe:v2.15.0``
    """

    runtime_image: str = defaults.RUNTIME_IMAGE
    csi_image: str = defaults.CSI_IMAGE
    csi_provisioner_image: str = defaults.CSI_PROVISIONER_IMAGE
    csi_node_driver_registrar_image: str = defaults.CSI_NODE_DRIVER_REGISTRAR_IMAGE
    csi_livenessprobe_image: str = defaults.CSI_LIVENESSPROBE_IMAGE

    def __post_init__(self) -> None:
        for f in fields(self):
            pinned_image(self, f.name, getattr(self, f.name))


@dataclass(frozen=True, kw_only=True)
class Resources:
    """One container's budget, requests = limits (Guaranteed QoS, so cache pods are not evicted first).

    :param cpu: Kubernetes CPU quantity (``"2"``, ``"500m"``).
    :param memory_gib: memory in GiB, at least 1.
    """

    cpu: str
    memory_gib: int

    def __post_init__(self) -> None:
        if not _CPU.match(self.cpu):
            raise invalid(self, "cpu", f"{self.cpu!r} is not a CPU quantity such as '2', '0.5' or '500m'")
        in_range(self, "memory_gib", self.memory_gib, 1)

    def to_k8s(self) -> k8s.ResourceRequirements:
        amount = {"cpu": quantity(self.cpu), "memory": quantity(f"{self.memory_gib}Gi")}
        return k8s.ResourceRequirements(requests=amount, limits=amount)

    @property
    def millicpu(self) -> int:
        return millicores(self.cpu)

    def __add__(self, other: Resources) -> Resources:
        """Two budgets in one container (the CSI node plugin hosts its FUSE children)."""
        return Resources(cpu=f"{self.millicpu + other.millicpu}m", memory_gib=self.memory_gib + other.memory_gib)


def _default_resources(container: str) -> Resources:
    cpu, memory_gib = defaults.RESOURCES[container]
    return Resources(cpu=cpu, memory_gib=memory_gib)


@dataclass(frozen=True, kw_only=True)
class CurvineResources:
    """Each Curvine container's budget.

    :param master: @default 2 CPU, 8 GiB
    :param worker: counted against each GPU node's memory budget. @default 4 CPU, 8 GiB
    :param fuse: the FUSE processes of a node, embedded in the CSI node plugin container (which gets this plus
        ``csi_node``); counted against each GPU node's memory budget. @default 2 CPU, 4 GiB
    :param csi_node: the CSI node plugin itself. @default 500m, 1 GiB
    :param csi_controller: @default 500m, 1 GiB
    :param sidecar: each CSI sidecar, the worker's NVMe check and the L2 janitor. @default 100m, 1 GiB
    """

    master: Resources = field(default_factory=lambda: _default_resources("master"))
    worker: Resources = field(default_factory=lambda: _default_resources("worker"))
    fuse: Resources = field(default_factory=lambda: _default_resources("fuse"))
    csi_node: Resources = field(default_factory=lambda: _default_resources("csi_node"))
    csi_controller: Resources = field(default_factory=lambda: _default_resources("csi_controller"))
    sidecar: Resources = field(default_factory=lambda: _default_resources("sidecar"))


@dataclass(frozen=True, kw_only=True)
class CurvineEviction:
    """How the L2 makes room: LMCache's ``fs://`` connector never deletes, so the janitor (``l2_janitor.py``) deletes
    the least recently used chunk files when the stored bytes reach ``high_watermark`` of the workers' capacity, down
    to ``low_watermark``. Both are fractions strictly between 0 and 1, low below high.

    :param high_watermark: @default 0.85
    :param low_watermark: @default 0.70
    :param policy: Curvine's own quota-eviction policy (kept configured; at v0.4.1 it only ever removes expired
        files). @default ``lru``
    """

    high_watermark: float = defaults.HIGH_WATERMARK
    low_watermark: float = defaults.LOW_WATERMARK
    policy: EvictionPolicy = defaults.EVICTION_POLICY

    def __post_init__(self) -> None:
        for name in ("high_watermark", "low_watermark"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise invalid(self, name, f"{value} must be between 0 and 1 (a fraction of the L2 capacity)")
        if self.low_watermark >= self.high_watermark:
            raise invalid(
                self, "low_watermark", f"{self.low_watermark} must be below high_watermark {self.high_watermark}"
            )
        one_of(self, "policy", self.policy, EvictionPolicy)


@dataclass(frozen=True, kw_only=True)
class MasterVolumeIds:
    """One master's static EBS volumes (IDs are usually CDK deploy-time tokens).

    :param meta_volume_id: the RocksDB metadata volume.
    :param journal_volume_id: the Raft journal volume.
    """

    meta_volume_id: str
    journal_volume_id: str


@dataclass(frozen=True, kw_only=True)
class CurvinePort:
    """One Curvine listener, for the security groups and NetworkPolicies that other modules own."""

    name: str
    """Field of :class:`CurvinePorts`."""
    port: int
    listener: Literal["master", "journal", "worker", "fuse"]
    network: Network
    """``host``: the listener shares the node's network namespace (security groups apply); ``pod``: a pod IP."""
    reached_by: tuple[str, ...]
    """Who must reach it. Curvine's RPC has no authentication or TLS: keep every other source out."""


def port_table(ports: CurvinePorts) -> tuple[CurvinePort, ...]:
    """Every Curvine port, where it listens and who must reach it (the one source for the network matrix)."""
    return (
        CurvinePort(
            name="master_rpc",
            port=ports.master_rpc,
            listener="master",
            network="pod",
            reached_by=(
                "worker (host network)",
                "FUSE client in the CSI node plugin (host network)",
                "CSI controller (pod network: curvine-cli, validate-config)",
                "other masters",
            ),
        ),
        CurvinePort(
            name="journal", port=ports.journal, listener="journal", network="pod", reached_by=("other masters (Raft)",)
        ),
        CurvinePort(
            name="master_web",
            port=ports.master_web,
            listener="master",
            network="pod",
            reached_by=("kvtiers verify through the API server's pod proxy (control plane)", "metrics scraper"),
        ),
        CurvinePort(
            name="worker_rpc",
            port=ports.worker_rpc,
            listener="worker",
            network="host",
            reached_by=(
                "FUSE clients on every HyperPod node (host network)",
                "master (pod network)",
                "other workers",
            ),
        ),
        CurvinePort(
            name="worker_web", port=ports.worker_web, listener="worker", network="host", reached_by=("metrics scraper",)
        ),
        CurvinePort(
            name="fuse_web", port=ports.fuse_web, listener="fuse", network="host", reached_by=("metrics scraper",)
        ),
    )


@dataclass(frozen=True, kw_only=True)
class CurvineSettings:
    """What a user chooses about one Curvine L2 beyond where it runs (see :class:`CurvineCluster`, which adds the
    placement the platform decides): names, volume sizes, cache geometry, eviction, ports, images and budgets.

    :param namespace: the Curvine namespace (created with the masters). @default ``curvine``
    :param cluster_id: Curvine's ``cluster_id``. @default ``kvtiers``
    :param meta_volume_gib: size of each master's metadata volume (1 to 16384): the EBS volume and the
        PersistentVolume both read it. @default 20
    :param journal_volume_gib: size of each master's journal volume (1 to 16384), likewise. @default 50
    :param audit_log: master audit log (``master.audit_logging_enabled``): one line per file operation, i.e. per
        LMCache chunk stored or looked up. Off: the RPC is unauthenticated, so the log names only the client host
        it trusts anyway (Curvine's own default is on). @default False
    :param nvme_mount: mount point of the node's NVMe instance store; the worker checks it is one before it starts.
        @default ``/opt/dlami/nvme`` (the DLAMI path)
    :param data_dir: cache directory below ``nvme_mount``. @default ``/opt/dlami/nvme/curvine``
    :param capacity_gb: cache capacity per worker (at least 1). @default 1000
    :param reserved_gb: space Curvine leaves free on the disk (``dir_reserved``, at least 0). @default 20
    :param block_size: Curvine block size (``<n>KB|MB|GB``); 64 MB holds several 14 MiB LMCache chunks of a 7B model
        per block. @default ``64MB``
    :param fs_path: Curvine namespace path the StorageClass serves (``fs-path``). @default ``/l2cache``
    :param eviction: watermarks and policy. @default :class:`CurvineEviction` defaults
    :param ports: @default :class:`CurvinePorts` defaults
    :param images: @default :class:`CurvineImages` defaults
    :param resources: @default :class:`CurvineResources` defaults
    """

    namespace: str = defaults.NAMESPACE
    cluster_id: str = defaults.CLUSTER_ID
    meta_volume_gib: int = META_VOLUME_GIB
    journal_volume_gib: int = JOURNAL_VOLUME_GIB
    audit_log: bool = defaults.AUDIT_LOG
    nvme_mount: str = defaults.NVME_MOUNT
    data_dir: str = defaults.DATA_DIR
    capacity_gb: int = defaults.CAPACITY_GB
    reserved_gb: int = defaults.RESERVED_GB
    block_size: str = defaults.BLOCK_SIZE
    fs_path: str = defaults.FS_PATH
    eviction: CurvineEviction = field(default_factory=CurvineEviction)
    ports: CurvinePorts = field(default_factory=CurvinePorts)
    images: CurvineImages = field(default_factory=CurvineImages)
    resources: CurvineResources = field(default_factory=CurvineResources)

    def __post_init__(self) -> None:
        dns_label(self, "namespace", self.namespace)
        dns_label(self, "cluster_id", self.cluster_id)
        in_range(self, "meta_volume_gib", self.meta_volume_gib, 1, MAX_GP3_GIB)
        in_range(self, "journal_volume_gib", self.journal_volume_gib, 1, MAX_GP3_GIB)
        absolute_path(self, "nvme_mount", self.nvme_mount)
        absolute_path(self, "data_dir", self.data_dir)
        if not self.data_dir.startswith(self.nvme_mount.rstrip("/") + "/"):
            raise invalid(self, "data_dir", f"{self.data_dir!r} must be below nvme_mount {self.nvme_mount!r}")
        in_range(self, "capacity_gb", self.capacity_gb, 1)
        in_range(self, "reserved_gb", self.reserved_gb, 0)
        if not _BLOCK_SIZE.match(self.block_size):
            raise invalid(self, "block_size", f"{self.block_size!r} is not a size such as '64MB' (KB, MB or GB)")
        absolute_path(self, "fs_path", self.fs_path)

    def settings(self) -> dict[str, Any]:
        """These settings as keyword arguments (for a :class:`CurvineCluster` from them)."""
        return {f.name: getattr(self, f.name) for f in fields(CurvineSettings)}


@dataclass(frozen=True, kw_only=True)
class CurvineCluster(CurvineSettings):
    """One Curvine L2 as each of its charts sees it (passed as ``cluster=``): its :class:`CurvineSettings` and where
    masters, workers and the CSI run. :class:`~kvtiers.constructs.curvine.CurvineL2` builds it from the HyperPod
    cluster and the journal volumes it creates.

    :param master_volumes: one :class:`MasterVolumeIds` per master; their number is the master count, 1, 3 or 5 (an
        odd Raft quorum), fixed at install.
    :param availability_zone: AZ name of the master volumes (a token for a new VPC); masters are pinned there.
    :param hyperpod_groups: every HyperPod instance group: each node runs a CSI node pod, so any serving pod can
        mount the L2. Names are unique.
    :param worker_nodes: nodes in ``worker_groups``, one worker each: the L2 capacity is this times
        ``capacity_gb``, what the janitor's watermarks are fractions of.
    :param worker_groups: groups that run a worker (node-local NVMe) and the masters; each one of
        ``hyperpod_groups``. @default every group in ``hyperpod_groups``
    :param tolerations: tolerations of the custom HyperPod taints, for the masters, workers and janitor. @default
        none (no custom taints)
    :param controller_off_hyperpod: the CSI controller must run off the HyperPod nodes (the cluster has nodes of its
        own for controllers), keeping the GPU nodes' CPU and memory for the engines. @default False: any Linux node,
        HyperPod's included (counted on them by the placement check)
    """

    master_volumes: tuple[MasterVolumeIds, ...]
    availability_zone: str
    hyperpod_groups: tuple[str, ...]
    worker_nodes: int
    worker_groups: tuple[str, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    controller_off_hyperpod: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.master_volumes) not in MASTER_COUNTS:
            raise invalid(
                self,
                "master_volumes",
                f"{len(self.master_volumes)} given; Curvine runs 1, 3 or 5 masters (an odd Raft quorum)",
            )
        if not self.availability_zone:
            raise invalid(self, "availability_zone", "is required")
        if not self.hyperpod_groups:
            raise invalid(self, "hyperpod_groups", "needs at least one HyperPod instance group")
        if len(set(self.hyperpod_groups)) != len(self.hyperpod_groups):
            raise invalid(self, "hyperpod_groups", f"names must be unique, got {list(self.hyperpod_groups)}")
        if self.worker_groups is not None:
            if not self.worker_groups:
                raise invalid(self, "worker_groups", "is empty; give None for every HyperPod group")
            unknown = sorted(set(self.worker_groups) - set(self.hyperpod_groups))
            if unknown:
                raise invalid(self, "worker_groups", f"{unknown} not in hyperpod_groups {list(self.hyperpod_groups)}")
        in_range(self, "worker_nodes", self.worker_nodes, 1)

    # ------------------------------------------------------------------------------------------- derived facts

    @property
    def masters(self) -> int:
        return len(self.master_volumes)

    @property
    def worker_group_names(self) -> tuple[str, ...]:
        return self.hyperpod_groups if self.worker_groups is None else self.worker_groups

    @property
    def data_subpath(self) -> str:
        """``data_dir`` relative to ``nvme_mount`` (the worker mounts it as a subPath of the checked mount)."""
        return self.data_dir[len(self.nvme_mount.rstrip("/")) + 1 :]

    @property
    def capacity_bytes(self) -> int:
        """All workers' cache capacity."""
        return self.worker_nodes * self.capacity_gb * GB

    @property
    def csi_node_plugin_resources(self) -> Resources:
        """The node plugin's own budget plus its FUSE processes' (embedded mode runs them in its container)."""
        return self.resources.csi_node + self.resources.fuse

    @property
    def master_count_note(self) -> str:
        """Said at every synth: nothing at synth time can see the deployed master count (see the contract)."""
        return (
            f"Curvine master count {self.masters} is fixed at install: Raft membership (journal_addrs) is not "
            "changed in place, so another master count on a deployed L2 breaks the journal "
            "group; deploy a new environment instead (docs/curvine-contract.md, master count)"
        )

    @property
    def master_hosts(self) -> tuple[str, ...]:
        return tuple(curvine_master_host(self.namespace, curvine_master_pod(i)) for i in range(self.masters))

    @property
    def master_addrs(self) -> str:
        """``host:port,...`` of every master's RPC endpoint (StorageClass ``master-addrs``)."""
        return ",".join(f"{host}:{self.ports.master_rpc}" for host in self.master_hosts)

    def cluster_config(self) -> dict[str, Any]:
        p = self.ports
        return {
            "cluster_id": self.cluster_id,
            # Empty directories on a fresh volume are initialized on first start; never reformat existing state.
            "format_master": False,
            "format_worker": False,
            "master": {
                "rpc_port": p.master_rpc,
                "web_port": p.master_web,
                # Subdirectories, never the volume root: ext4's lost+found fails Curvine's data-dir guard.
                "meta_dir": f"{META_MOUNT}/db",
                "enable_quota_eviction": True,
                "quota_eviction_mode": "delete",
                "quota_eviction_policy": self.eviction.policy,
                "quota_eviction_high_rate": self.eviction.high_watermark,
                "quota_eviction_low_rate": self.eviction.low_watermark,
                # Writes go to the worker whose hostname equals the client's (both the node IP).
                "worker_policy": "local",
                "audit_logging_enabled": self.audit_log,
            },
            "journal": {
                "enable": True,
                "rpc_port": p.journal,
                "journal_dir": f"{JOURNAL_MOUNT}/db",
                "journal_addrs": [
                    {"id": i + 1, "hostname": host, "port": p.journal} for i, host in enumerate(self.master_hosts)
                ],
            },
            "worker": {
                "rpc_port": p.worker_rpc,
                "web_port": p.worker_web,
                "dir_reserved": f"{self.reserved_gb}GB",
                "data_dir": [f"[SSD:{self.capacity_gb}GB]{DATA_MOUNT}"],
            },
            "client": {
                "master_addrs": [{"hostname": host, "port": p.master_rpc} for host in self.master_hosts],
                "block_size": self.block_size,
                # Off: the worker's data path is not visible to the FUSE process (it runs in the CSI node
                # container), so a local short-circuit open would fail; writes go through the worker's RPC.
                "short_circuit": False,
            },
            "fuse": {"web_port": p.fuse_web, "log": dict(FUSE_LOG)},
        }

    @property
    def config_toml(self) -> str:
        return tomli_w.dumps(self.cluster_config())

    @property
    def config_checksum(self) -> str:
        """Of what the servers read, not the TOML text (a new TOML writer version must not roll them) and not
        ``[fuse]``, which masters and workers never read (only curvine-fuse does, ``mount_run.rs``; it reaches the FUSE
        client when the CSI node plugin restarts): a FUSE setting must not restart the Raft group."""
        servers = {k: v for k, v in self.cluster_config().items() if k != "fuse"}
        canonical = json.dumps(servers, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()
