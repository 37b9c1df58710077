"""Typed props of the Curvine L2 charts and the facts derived from them (names, addresses, the cluster config).

Everything the four charts and ``curvine-cluster.toml`` share (service names, ports, paths, master addresses) is
computed here once, so the objects and the config file cannot disagree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kvtiers.config.schema import Environment
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


@dataclass(frozen=True)
class Resources:
    cpu: str
    memory_gib: int

    def to_k8s(self) -> dict:
        amount = {"cpu": self.cpu, "memory": f"{self.memory_gib}Gi"}
        return {"requests": amount, "limits": amount}


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
    data_dir: str
    capacity_gb: int
    reserved_gb: int
    block_size: str
    eviction_high: float
    eviction_low: float
    eviction_policy: str
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
            raise ValueError(f"CurvineProps needs {self.masters} journal volume pairs, got {len(self.journal_volume_ids)}")
        if not self.data_dir.startswith("/"):
            raise ValueError(f"CurvineProps.data_dir must be absolute, got {self.data_dir!r}")

    @classmethod
    def from_environment(
        cls, env: Environment, *, journal_volume_ids: tuple[tuple[str, str], ...], availability_zone: str
    ) -> CurvineProps:
        c = env.curvine
        taints = {(t.key, t.value, t.effect) for g in env.hyperpod.instance_groups for t in g.taints}
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
            tolerations=tuple(
                {"key": k, "operator": "Equal", "value": v, "effect": e} for k, v, e in sorted(taints)
            ),
            data_dir=c.worker.data_dir,
            capacity_gb=c.worker.capacity_gb,
            reserved_gb=c.worker.reserved_gb,
            block_size=c.block_size,
            eviction_high=c.eviction.high_watermark,
            eviction_low=c.eviction.low_watermark,
            eviction_policy=c.eviction.policy,
            fs_path=c.fs_path,
            ports=c.ports.model_dump(),
            images=c.images.model_dump(),
            resources={k: Resources(v.cpu, v.memory_gib) for k, v in c.resources},
            serving_namespace=env.serving.namespace,
            claim_name=env.serving.l2_claim_name,
            claim_size_gib=env.serving.l2_claim_size_gib,
        )

    # ------------------------------------------------------------------------------------------- derived facts

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
                "worker_policy": "local",
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
                "master_addrs": [{"hostname": self.master_host(i), "port": p["master_rpc"]} for i in range(self.masters)],
                "block_size": self.block_size,
            },
            "fuse": {"web_port": p["fuse_web"]},
        }

    @property
    def config_toml(self) -> str:
        return toml.dumps(self.cluster_config())

    @property
    def config_checksum(self) -> str:
        return hashlib.sha256(self.config_toml.encode()).hexdigest()
