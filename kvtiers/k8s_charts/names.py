"""The one home of the names the charts give their objects and the ports, labels and selectors they use: read by
the charts, by the router's pod discovery and by ``kvtiers verify``. Tests build their fakes from rendered objects,
never from these constants."""

PART_OF = "kvtiers"
NAME = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "app.kubernetes.io/instance"
PART_OF_KEY = "app.kubernetes.io/part-of"
ENDPOINT = "kvtiers.io/endpoint"
"""Set on every pod of one serving endpoint; the router discovers exactly the pods with its endpoint's value."""

HYPERPOD_NODE_SELECTOR = {"sagemaker.amazonaws.com/compute-type": "hyperpod"}
"""Label HyperPod puts on its nodes (the system node group has no such label)."""
HYPERPOD_INSTANCE_GROUP = "sagemaker.amazonaws.com/instance-group-name"
"""Label HyperPod puts on each node with its instance group's name."""
GPU_RESOURCE = "nvidia.com/gpu"


def component_labels(name: str, component: str) -> dict[str, str]:
    return {NAME: name, COMPONENT: component, PART_OF_KEY: PART_OF}


# Curvine (the L2): object names and ports.

CURVINE_MASTER = "curvine-master"
"""The masters' StatefulSet, headless Service and PodDisruptionBudget; pod ``<ordinal>`` is ``curvine-master-<n>``."""
CURVINE_WORKER = "curvine-worker"
"""The workers' DaemonSet."""
CURVINE_CSI_CONTROLLER = "curvine-csi-controller"
"""The CSI controller's Deployment, ServiceAccount and (Cluster)Role."""
CURVINE_CSI_NODE = "curvine-csi-node"
"""The CSI node plugin's DaemonSet and ServiceAccount."""
CURVINE_JANITOR = "curvine-l2-janitor"
"""The L2 janitor's CronJob and script ConfigMap (in the serving namespace)."""
CURVINE_CONFIG_MAP = "curvine-config"
CURVINE_CONFIG_KEY = "curvine-cluster.toml"
"""Key of the cluster config in :data:`CURVINE_CONFIG_MAP`, mounted as a file of this name."""
CURVINE_DRIVER = "curvine"
"""CSIDriver name, the StorageClass's provisioner."""
CURVINE_STORAGE_CLASS = "curvine-l2"
CURVINE_STATIC_CLASS = "curvine-journal-static"
"""Storage class name that only the static journal PersistentVolumes carry (no provisioner behind it)."""
CURVINE_CSI_HEALTH_PORT = 9909
"""``--health-port`` of the CSI liveness-probe sidecars (healthz of the CSI plugin containers)."""
CURVINE_CONFIG_CHECKSUM_ANNOTATION = "kvtiers.io/config-sha256"
"""On the master and worker pod templates: a change of the cluster config rolls them."""
CURVINE_MASTER_OVERVIEW_PATH = "api/overview"
"""Curvine master web route (curvine-master/src/master/router_handler.rs); ``master_state`` is ``Active`` on the
Raft leader, ``Standby`` on followers (master_monitor.rs ``journal_state``)."""
CURVINE_MASTER_BROWSE_PATH = "api/browse"
"""``?path=``: the FileStatus list of a directory (same file; ``path``, ``is_dir``, ``mtime`` in milliseconds)."""
CURVINE_MASTER_BLOCKS_PATH = "api/block_locations"
"""``?path=``: FileBlocks of a file; ``block_locs[].locs[].hostname`` is the worker's advertised hostname."""
CURVINE_LEADER_STATE = "Active"


def curvine_master_pod(ordinal: int) -> str:
    return f"{CURVINE_MASTER}-{ordinal}"


def curvine_master_host(namespace: str, pod: str) -> str:
    """The DNS name of master pod ``pod`` through the headless Service: the only derivation of a master address
    (journal peers, client master list, the StorageClass's ``master-addrs`` and each master's own hostname, where
    ``pod`` is ``$(POD_NAME)``)."""
    return f"{pod}.{CURVINE_MASTER}.{namespace}.svc.cluster.local"


# Serving: engines, routers and operator endpoints.
