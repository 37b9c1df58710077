"""Defaults of the Curvine L2's charts and construct (``kvtiers.k8s_charts.curvine_l2``,
``kvtiers.constructs.curvine``), with the reason for each in the docstring of the prop that takes it.

Free of CDK imports, so that the environment schema reads the same values without loading cdk8s: each default
below is the one home of that value, for the library and for the environment file.
"""

from __future__ import annotations

from typing import Literal

NAMESPACE = "curvine"
CLUSTER_ID = "kvtiers"
AUDIT_LOG = False
NVME_MOUNT = "/opt/dlami/nvme"
DATA_DIR = "/opt/dlami/nvme/curvine"
CAPACITY_GB = 1000
RESERVED_GB = 20
BLOCK_SIZE = "64MB"
FS_PATH = "/l2cache"

HIGH_WATERMARK = 0.85
LOW_WATERMARK = 0.70
EvictionPolicy = Literal["lru", "lfu"]
EVICTION_POLICY: EvictionPolicy = "lru"
JANITOR_INTERVAL_SECONDS = 600
MIN_JANITOR_INTERVAL_SECONDS = 60

CLAIM_NAME = "curvine-l2"
CLAIM_SIZE_GIB = 100

RUNTIME_IMAGE = "ghcr.io/curvineio/curvine:v0.4.1"
CSI_IMAGE = "ghcr.io/curvineio/curvine-csi:v0.4.1"
CSI_PROVISIONER_IMAGE = "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0"
CSI_NODE_DRIVER_REGISTRAR_IMAGE = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0"
CSI_LIVENESSPROBE_IMAGE = "registry.k8s.io/sig-storage/livenessprobe:v2.15.0"

MASTER_RPC_PORT = 8995
JOURNAL_PORT = 8996
WORKER_RPC_PORT = 8997
MASTER_WEB_PORT = 9000
WORKER_WEB_PORT = 9001
FUSE_WEB_PORT = 9002

RESOURCES: dict[str, tuple[str, int]] = {
    "master": ("2", 8),
    "worker": ("4", 8),
    "fuse": ("2", 4),
    "csi_node": ("500m", 1),
    "csi_controller": ("500m", 1),
    "sidecar": ("100m", 1),
}
"""Each Curvine container's budget: CPU quantity and memory in GiB (requests = limits)."""
