"""Typed props of the Curvine L2 charts and the facts derived from them (names, addresses, the cluster config).

Everything the four charts and ``curvine-cluster.toml`` share (service names, ports, paths, master addresses) is
computed here once, so the objects and the config file cannot disagree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from kvtiers.config.schema import Environment
from kvtiers.config.sizing import GB
from kvtiers.k8s_charts.curvine_l2 import toml

MASTER = "curvine-master"
WORKER = "curvine-worker"
CSI_CONTROLLER = "curvine-csi-controller"
CSI_NODE = "curvine-csi-node"
CONFIG_MAP = "curvine-config"
DRIVER = "curvine"
STORAGE_CLASS = "curvine-l2"
STATIC_CLASS = "curvine-journal-static"
"""Storage class name that only the static journal PersistentVolumes carry (no provisioner behind it)."""
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

GRACE_SECONDS = {"master": 120, "worker": 60}
"""terminationGracePeriodSeconds: on SIGTERM the server stops its RPC loop and runs its shutdown hooks
(``rpc_server.rs``), the master closing its RocksDB metadata and Raft journal; the image's own stop action waits
15 s before SIGKILL (``entrypoint.sh``). Generous margins: a hard-killed master replays its journal on start."""

Network = Literal["host", "pod"]


@dataclass(frozen=True)
class CurvinePort:
    """One Curvine listener, for the security groups and NetworkPolicies that other modules own."""

    name: str
    """Key in ``CurvineProps.ports`` / ``curvine.ports``."""
    port: int
    listener: Literal["master", "journal", "worker", "fuse"]
    network: Network
    """``host``: the listener shares the node's network namespace (security groups apply); ``pod``: a pod IP."""
    reached_by: tuple[str, ...]
    """Who must reach it. Curvine's RPC has no authentication or TLS: keep every other source out."""


def port_table(ports: dict[str, int]) -> tuple[CurvinePort, ...]:
    """Every Curvine port, where it listens and who must reach it (the one source for the network matrix)."""
    return (
        CurvinePort(
            "master_rpc",
            ports["master_rpc"],
            "master",
            "pod",
            (
                "worker (host network)",
                "FUSE client in the CSI node plugin (host network)",
                "CSI controller (pod network: curvine-cli, validate-config)",
                "other masters",
            ),
        ),
        CurvinePort("journal", ports["journal"], "journal", "pod", ("other masters (Raft)",)),
        CurvinePort(
            "master_web",
            ports["master_web"],
            "master",
            "pod",
            ("kvtiers verify through the API server's pod proxy (control plane)", "metrics scraper"),
        ),
        CurvinePort(
            "worker_rpc",
            ports["worker_rpc"],
            "worker",
            "host",
            ("FUSE clients on every HyperPod node (host network)", "master (pod network)", "other workers"),
        ),
        CurvinePort("worker_web", ports["worker_web"], "worker", "host", ("metrics scraper",)),
        CurvinePort("fuse_web", ports["fuse_web"], "fuse", "host", ("metrics scraper",)),
    )


@dataclass(frozen=True)
class Resources:
    cpu: str
    memory_gib: int

    def to_k8s(self) -> dict:
        amount = {"cpu": self.cpu, "memory": f"{self.memory_gib}Gi"}
        return {"requests": amount, "limits": amount}

    @property
    def millicpu(self) -> int:
        return int(float(self.cpu[:-1])) if self.cpu.endswith("m") else int(float(self.cpu) * 1000)

    def __add__(self, other: Resources) -> Resources:
        """Two budgets in one container (the CSI node plugin hosts its FUSE children)."""
        return Resources(f"{self.millicpu + other.millicpu}m", self.memory_gib + other.memory_gib)


@dataclass(frozen=True)
class CurvineProps:
    namespace: str
    cluster_id: str
    masters: int
    journal_volume_ids: tuple[tuple[str, str], ...]
    """Per master: (meta volume ID, journal volume ID), CDK deploy-time tokens."""
    availability_zone: str
    """AZ name of the journal volumes (a token for a new VPC); masters are pinned there."""
    meta_size_gib: int
    journal_size_gib: int
    worker_groups: tuple[str, ...]
    """HyperPod instance groups that run a worker (node-local NVMe)."""
    hyperpod_groups: tuple[str, ...]
    """Every HyperPod group: each runs a CSI node pod so any serving pod can mount the L2."""
    tolerations: tuple[dict, ...]
    nvme_mount: str
    """Mount point of the node's NVMe instance store; the worker checks it before it starts."""
    data_dir: str
    """Cache directory below ``nvme_mount``."""
    capacity_gb: int
    reserved_gb: int
    block_size: str
    eviction_high: float
    eviction_low: float
    eviction_policy: str
    janitor_schedule: str
    """Cron schedule of the L2 janitor (the eviction that works at v0.4.1, see ``l2_janitor.py``)."""
    janitor_image: str
    """Image the janitor runs in: the engine image (it has Python and is already on the GPU nodes)."""
    l2_capacity_bytes: int
    """All workers' cache capacity: what the janitor's watermarks are fractions of."""
    audit_log: bool
    """Master audit log (``master.audit_logging_enabled``): one line per file operation."""
    fs_path: str
    ports: dict[str, int]
    images: dict[str, str]
    resources: dict[str, Resources]
    serving_namespace: str
    claim_name: str
    claim_size_gib: int

    def __post_init__(self) -> None:
        if self.masters not in (1, 3, 5):
            raise ValueError(f"CurvineProps.masters must be 1, 3 or 5, got {self.masters}")
        if len(self.journal_volume_ids) != self.masters:
            raise ValueError(
                f"CurvineProps needs {self.masters} journal volume pairs, got {len(self.journal_volume_ids)}"
            )
        if not self.data_dir.startswith(self.nvme_mount.rstrip("/") + "/"):
            raise ValueError(f"CurvineProps.data_dir {self.data_dir!r} must be below nvme_mount {self.nvme_mount!r}")

    @property
    def data_subpath(self) -> str:
        """``data_dir`` relative to ``nvme_mount`` (the worker mounts it as a subPath of the checked mount)."""
        return self.data_dir[len(self.nvme_mount.rstrip("/")) + 1 :]

    @classmethod
    def from_environment(
        cls, env: Environment, *, journal_volume_ids: tuple[tuple[str, str], ...], availability_zone: str
    ) -> CurvineProps:
        c = env.curvine
        return cls(
            namespace=c.namespace,
            cluster_id=c.cluster_id,
            masters=c.master.replicas,
            journal_volume_ids=tuple(journal_volume_ids),
            availability_zone=availability_zone,
            meta_size_gib=c.master.meta_volume_gib,
            journal_size_gib=c.master.journal_volume_gib,
            worker_groups=tuple(g.name for g in env.curvine_worker_groups),
            hyperpod_groups=tuple(g.name for g in env.hyperpod.instance_groups),
            tolerations=env.hyperpod.taint_tolerations,
            nvme_mount=c.worker.nvme_mount,
            data_dir=c.worker.data_dir,
            capacity_gb=c.worker.capacity_gb,
            reserved_gb=c.worker.reserved_gb,
            block_size=c.block_size,
            eviction_high=c.eviction.high_watermark,
            eviction_low=c.eviction.low_watermark,
            eviction_policy=c.eviction.policy,
            janitor_schedule=c.eviction.janitor_schedule,
            janitor_image=env.serving.images.vllm_image,
            l2_capacity_bytes=env.sizing.curvine_workers * c.worker.capacity_gb * GB,
            audit_log=c.master.audit_log,
            fs_path=c.fs_path,
            ports=c.ports.model_dump(),
            images=c.images.model_dump(),
            resources={k: Resources(v.cpu, v.memory_gib) for k, v in c.resources},
            serving_namespace=env.serving.namespace,
            claim_name=env.serving.l2_claim_name,
            claim_size_gib=env.serving.l2_claim_size_gib,
        )

    # ------------------------------------------------------------------------------------------- derived facts

    @property
    def csi_node_plugin_resources(self) -> Resources:
        """The node plugin's own budget plus its FUSE processes' (embedded mode runs them in its container)."""
        return self.resources["csi_node"] + self.resources["fuse"]

    @property
    def master_count_note(self) -> str:
        """Said at every synth: nothing at synth time can see the deployed master count (see the contract)."""
        return (
            f"Curvine master count {self.masters} is fixed at install: Raft membership (journal_addrs) is not "
            "changed in place, so a different curvine.master.replicas on a deployed environment breaks the journal "
            "group; deploy a new environment instead (docs/curvine-contract.md, master count)"
        )

    def master_host(self, ordinal: int) -> str:
        return f"{MASTER}-{ordinal}.{MASTER}.{self.namespace}.svc.cluster.local"

    @property
    def master_addrs(self) -> str:
        """``host:port,...`` of every master's RPC endpoint (StorageClass ``master-addrs``)."""
        return ",".join(f"{self.master_host(i)}:{self.ports['master_rpc']}" for i in range(self.masters))

    def cluster_config(self) -> dict:
        p = self.ports
        return {
            "cluster_id": self.cluster_id,
            # Empty directories on a fresh volume are initialized on first start; never reformat existing state.
            "format_master": False,
            "format_worker": False,
            "master": {
                "rpc_port": p["master_rpc"],
                "web_port": p["master_web"],
                # Subdirectories, never the volume root: ext4's lost+found fails Curvine's data-dir guard.
                "meta_dir": f"{META_MOUNT}/db",
                "enable_quota_eviction": True,
                "quota_eviction_mode": "delete",
                "quota_eviction_policy": self.eviction_policy,
                "quota_eviction_high_rate": self.eviction_high,
                "quota_eviction_low_rate": self.eviction_low,
                # Writes go to the worker whose hostname equals the client's (both the node IP).
                "worker_policy": "local",
                "audit_logging_enabled": self.audit_log,
            },
            "journal": {
                "enable": True,
                "rpc_port": p["journal"],
                "journal_dir": f"{JOURNAL_MOUNT}/db",
                "journal_addrs": [
                    {"id": i + 1, "hostname": self.master_host(i), "port": p["journal"]} for i in range(self.masters)
                ],
            },
            "worker": {
                "rpc_port": p["worker_rpc"],
                "web_port": p["worker_web"],
                "dir_reserved": f"{self.reserved_gb}GB",
                "data_dir": [f"[SSD:{self.capacity_gb}GB]{DATA_MOUNT}"],
            },
            "client": {
                "master_addrs": [
                    {"hostname": self.master_host(i), "port": p["master_rpc"]} for i in range(self.masters)
                ],
                "block_size": self.block_size,
                # Off: the worker's data path is not visible to the FUSE process (it runs in the CSI node
                # container), so a local short-circuit open would fail; writes go through the worker's RPC.
                "short_circuit": False,
            },
            "fuse": {"web_port": p["fuse_web"]},
        }

    @property
    def config_toml(self) -> str:
        return toml.dumps(self.cluster_config())

    @property
    def config_checksum(self) -> str:
        return hashlib.sha256(self.config_toml.encode()).hexdigest()
