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


def pascal_case(name: str) -> str:
    """``qwen2-7b`` as ``Qwen27b``: a Kubernetes name as a part of a CDK construct id."""
    return "".join(part.capitalize() for part in name.split("-"))


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
"""The L2 janitor's Deployment and script ConfigMap (in the serving namespace)."""
JANITOR_L2_MOUNT = "/l2"
"""Where the janitor mounts the whole L2 claim (every endpoint's directory is below it)."""
CURVINE_JANITOR_COMPONENT = "l2-janitor"
"""``app.kubernetes.io/component`` of the janitor's pod (the scrape configuration keeps it by this)."""
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
CURVINE_JANITOR_SCRIPT_CHECKSUM_ANNOTATION = "kvtiers.io/janitor-script-sha256"
"""On the L2 janitor's pod template: a change of its script (a ConfigMap volume) restarts it with the new code."""
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

ENGINE_COMPONENT = "engine"
ROUTER_COMPONENT = "router"
ENGINE_PORT = 8000
"""vLLM's OpenAI server port (``--port``), also the port the router's discovery calls (``--k8s-port``)."""
CURVINE_JANITOR_METRICS_PORT = ENGINE_PORT
"""The L2 janitor's ``/metrics``: the engines' port number, so the collector's existing path to HyperPod nodes (the
``scraper`` rows of the node traffic matrix) reaches it without another security-group rule."""
ROUTER_PORT = 8000
"""Router container port."""
ROUTER_SERVICE_PORT = 80
ROUTER_HEALTH_PATH = "health"
ROUTER_ENGINES_PATH = "engines"
"""The router's list of the engines its discovery found (production-stack ``/engines``)."""
LMCACHE_CONTROLLER_PULL_PORT = 9000
"""kvaware: the router's embedded LMCache controller PULL socket (``--lmcache-controller-port``)."""
LMCACHE_CONTROLLER_REPLY_PORT = 9001
"""kvaware: the controller's reply socket (``--lmcache-controller-reply-port``); LMCache 0.5 requires it."""
LMCACHE_WORKER_PORT_BASE = 8001
"""kvaware: LMCache worker port of TP rank 0 on each engine; rank i uses base + i."""
OPERATOR_POD_LABEL = "app"
"""The HyperPod Inference Operator labels an endpoint's pods ``app: <InferenceEndpointConfig metadata.name>``: the
sagemaker-hyperpod SDK 3.12.0 lists an endpoint's pods by exactly this label (``sagemaker/hyperpod/inference/
hp_endpoint.py``, ``list_pods``)."""
OPERATOR_PORT = 8000
"""An operator endpoint's invocation and metrics port: vLLM's default ``--port``, which the operator's worker
(``modelInvocationPort``) and kvtiers' NetworkPolicies and scrape configuration name."""


def engine_name(endpoint: str) -> str:
    """The engine Deployment, its Service and PodDisruptionBudget."""
    return f"{endpoint}-engine"


def engine_service_account_name(endpoint: str) -> str:
    """ServiceAccount of an endpoint's vLLM pods: the subject of its EKS Pod Identity association (S3 weights)."""
    return engine_name(endpoint)


def lmcache_config_map_name(endpoint: str) -> str:
    return f"{endpoint}-lmcache"


def router_name(endpoint: str) -> str:
    """The router Deployment, its ServiceAccount and its ClusterIP Service (clients, and kvaware engines reaching the
    controller, use this name)."""
    return f"{endpoint}-router"


def router_scripts_config_map_name(endpoint: str) -> str:
    """The ConfigMap with the router's kvtiers modules (the key check, kvaware's fallback)."""
    return f"{router_name(endpoint)}-kvtiers"


def router_discovery_role_name(endpoint: str) -> str:
    return f"{router_name(endpoint)}-discovery"


def router_load_balancer_name(endpoint: str) -> str:
    return f"{endpoint}{ROUTER_LOAD_BALANCER_SUFFIX}"


def router_host(endpoint: str, namespace: str) -> str:
    """The router Service's cluster DNS name (kvaware engines reach the LMCache controller there)."""
    return f"{router_name(endpoint)}.{namespace}.svc"


def engine_pod_labels(endpoint: str) -> dict[str, str]:
    """Labels of an endpoint's engine pods; the router discovers them by :func:`engine_selector`."""
    return {**component_labels(endpoint, ENGINE_COMPONENT), ENDPOINT: endpoint}


def router_pod_labels(endpoint: str) -> dict[str, str]:
    return {**component_labels(endpoint, ROUTER_COMPONENT), ENDPOINT: endpoint}


def engine_selector(endpoint: str) -> dict[str, str]:
    """The router's discovery selector: endpoint *and* component, so it never matches the router's own pods."""
    return {ENDPOINT: endpoint, COMPONENT: ENGINE_COMPONENT}


def router_selector(endpoint: str) -> dict[str, str]:
    return {ENDPOINT: endpoint, COMPONENT: ROUTER_COMPONENT}


NAME_MAX = 63
"""DNS-1123 labels (Service names, label values) and Kyverno policy names (``api/kyverno/v1/utils.go`` @ v1.15.2)."""
FINGERPRINT_LENGTH = 8
"""Hex digits of an operator endpoint's fingerprint in its object name."""
ROUTER_LOAD_BALANCER_SUFFIX = "-router-nlb"
OPERATOR_POLICY_SUFFIX = "-curvine-l2"
OPERATOR_GUARD_SUFFIX = "-l2-guard"
"""The ConfigMap with the L2 guard an operator endpoint object's pods mount: ``<object name>-l2-guard``."""


def operator_object_name(endpoint: str, fingerprint: str) -> str:
    """The InferenceEndpointConfig of an operator endpoint: its name and the fingerprint of its immutable fields."""
    return f"{endpoint}-{fingerprint}"


def operator_policy_name(object_name: str) -> str:
    """The Kyverno Policy that attaches the Curvine L2 to the pods of ``object_name``."""
    return f"{object_name}{OPERATOR_POLICY_SUFFIX}"


def operator_guard_config_map_name(object_name: str) -> str:
    """The ConfigMap with the L2 guard the pods of ``object_name`` load (one per endpoint object, like the policy)."""
    return f"{object_name}{OPERATOR_GUARD_SUFFIX}"


def longest_endpoint_name(serving: str) -> tuple[int, str]:
    """The longest endpoint name that keeps every name and label derived from it within 63 characters, and the
    derived name that sets the limit. An operator endpoint's limit holds whether or not its Curvine L2 is on, so
    that turning the L2 on never breaks a name."""
    if serving == "operator":
        longest = operator_policy_name(operator_object_name("", "0" * FINGERPRINT_LENGTH))
        return NAME_MAX - len(longest), f"its Kyverno Policy <name>{longest}"
    return NAME_MAX - len(
        ROUTER_LOAD_BALANCER_SUFFIX
    ), f"its router's load balancer Service <name>{ROUTER_LOAD_BALANCER_SUFFIX}"


def operator_pod_labels(object_name: str) -> dict[str, str]:
    """The label the operator puts on the pods of the InferenceEndpointConfig ``object_name``."""
    return {OPERATOR_POD_LABEL: object_name}


def label_selector(labels: dict[str, str]) -> str:
    """``key=value,...`` in the labels' order: the form of ``kubectl -l`` and the router's ``--k8s-label-selector``."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def lmcache_worker_ports(gpu_workers: int) -> tuple[int, ...]:
    """kvaware: the LMCache worker port of each rank of an engine (one per GPU worker, tensor x pipeline parallel:
    LMCache numbers its workers by vLLM's global rank)."""
    return tuple(LMCACHE_WORKER_PORT_BASE + rank for rank in range(gpu_workers))
