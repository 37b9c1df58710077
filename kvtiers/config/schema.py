"""The typed schema of one environment file (``config/<env>.yaml``).

Every model forbids unknown keys and is frozen: an environment is validated once, as a whole, before any construct
exists, and then flows through the app unchanged. Cross-field rules that involve more than one section live in
:class:`Environment`'s validators so that they are checked in one place.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from kvtiers.catalog import curvine_defaults as curvine
from kvtiers.catalog import platform_defaults as platform
from kvtiers.catalog import serving_defaults
from kvtiers.catalog.aws_limits import (
    GP3_MIN_IOPS,
    GP3_MIN_MIBPS,
)
from kvtiers.catalog.instance_types import (
    G6E_INSTANCE_TYPES,
    InstanceType,
    check_instance_group,
)
from kvtiers.catalog.kubernetes import DEFAULT_KUBERNETES_VERSION
from kvtiers.catalog.models import DTYPE_BYTES, KNOWN_MODELS, ModelShape
from kvtiers.catalog.versions import (
    DEFAULT_ENGINE_IMAGE,
    DEFAULT_ROUTER_IMAGE,
    ENGINE_IMAGES,
    EngineRelease,
    engine_release,
)
from kvtiers.k8s_charts.l2 import DEFAULT_MOUNT_PATH

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SAGEMAKER_NAME = platform.SAGEMAKER_NAME_PATTERN
EKS_CLUSTER_NAME = platform.EKS_CLUSTER_NAME_PATTERN
IAM_ROLE_ARN = platform.IAM_ROLE_ARN_PATTERN
# An image reference with an explicit tag or digest. `latest` is rejected separately with its own message.

RoutingStrategy = Literal["prefixaware", "kvaware", "session", "roundrobin"]

G6eInstanceType = Literal[
    "ml.g6e.xlarge",
    "ml.g6e.2xlarge",
    "ml.g6e.4xlarge",
    "ml.g6e.8xlarge",
    "ml.g6e.12xlarge",
    "ml.g6e.16xlarge",
    "ml.g6e.24xlarge",
    "ml.g6e.48xlarge",
]
assert set(G6eInstanceType.__args__) == set(G6E_INSTANCE_TYPES)  # type: ignore[attr-defined]

DnsLabel = Annotated[str, Field(pattern=DNS1123_LABEL, max_length=63)]
SecretName = Annotated[str, Field(pattern=r"^[A-Za-z0-9/_+=.@-]{1,512}$")]
"""A Secrets Manager secret name (not an ARN): letters, digits and ``/_+=.@-``."""
AbsolutePath = Annotated[str, Field(pattern=r"^/[^\s]*$", min_length=2)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# --------------------------------------------------------------------------------------------------- network


class NewVpc(Strict):
    """A VPC created by the stack: EKS subnets in two AZs and one HyperPod subnet in the GPU capacity's AZ ID."""

    mode: Literal["new"] = "new"
    """Create a VPC."""
    cidr: str = platform.VPC_CIDR
    """VPC CIDR. Default: a /16, room for the /24 EKS subnets and the /18 HyperPod subnet."""
    availability_zones: tuple[str, str] = platform.EKS_AVAILABILITY_ZONES
    """Two AZ names for the EKS control-plane subnets (EKS needs two)."""
    hyperpod_az_id: str = Field(pattern=platform.AZ_ID_PATTERN)
    """AZ ID (for example ``use1-az2``) of the HyperPod subnet: where your G6e capacity is. IDs, not names,
    because names are shuffled per account."""
    hyperpod_subnet_cidr: str = platform.HYPERPOD_SUBNET_CIDR
    """Large because every HyperPod pod takes a VPC IP through the VPC CNI."""
    nat_gateways: int = platform.NAT_GATEWAYS
    """One NAT gateway by default (cost); two for AZ-independent egress."""


class ExistingVpc(Strict):
    """An existing VPC imported by IDs (no lookups at synth)."""

    mode: Literal["existing"]
    """Import an existing VPC."""
    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$")
    cidr: str
    """The VPC's primary CIDR."""
    private_subnet_ids: tuple[str, ...]
    """Private subnets (with NAT egress) for the EKS control plane, in at least two AZs."""
    private_subnet_cidrs: tuple[str, ...] | None = None
    """CIDRs of ``private_subnet_ids``, in the same order: where the API server's proxy connects from, which routers
    and engines admit for ``kvtiers verify``. Required when an endpoint sets ``allowed_clients``. Default: none, so
    that rule admits the whole VPC (``cidr``)."""
    availability_zones: tuple[str, ...]
    """AZ names of ``private_subnet_ids``, in the same order."""
    hyperpod_subnet_id: str = Field(pattern=r"^subnet-[0-9a-f]{8,17}$")
    hyperpod_subnet_cidr: str | None = None
    """CIDR of the HyperPod subnet: the only peers Curvine's masters admit by address. Default: none, so they admit
    the whole VPC (``cidr``)."""
    hyperpod_availability_zone: str
    """AZ name of the HyperPod subnet; the Curvine journal volumes are created there."""
    load_balancer_subnet_cidrs: tuple[str, ...] | None = None
    """CIDRs of every subnet the Inference Operator's internal ALB may use (those tagged
    ``kubernetes.io/role/internal-elb``), inside ``cidr``: operator endpoints' pods admit their ALB ports from them.
    Default: none, so they admit the whole VPC (which subnets carry the tag is not known at synth)."""
    security_group_id: str | None = Field(default=None, pattern=r"^sg-[0-9a-f]{8,17}$")
    """Security group for EKS and HyperPod. Default: none, so the stack creates the EFA/FSx group."""


Network = Annotated[NewVpc | ExistingVpc, Field(discriminator="mode")]


# --------------------------------------------------------------------------------------------------- EKS


class EksAddonVersions(Strict):
    """Pinned EKS add-on versions for the default Kubernetes 1.34 (``aws eks describe-addon-versions
    --kubernetes-version 1.34``; sources in docs/aws-prerequisites.md). Change them with ``kubernetes_version``.

    Pinned, never resolved at synth, so that ``cdk diff`` shows every upgrade.
    """

    vpc_cni: str = platform.VPC_CNI_VERSION
    """HyperPod needs the VPC CNI at 1.18.3 or later."""
    coredns: str = platform.COREDNS_VERSION
    kube_proxy: str = platform.KUBE_PROXY_VERSION
    """kube-proxy's minor version is the cluster's."""
    eks_pod_identity_agent: str = platform.EKS_POD_IDENTITY_AGENT_VERSION
    aws_ebs_csi_driver: str = platform.EBS_CSI_DRIVER_VERSION
    aws_secrets_store_csi_driver_provider: str = platform.SECRETS_STORE_CSI_PROVIDER_VERSION
    """ASCP: delivers the endpoints' API keys and Hugging Face tokens from Secrets Manager as files."""


class SystemNodegroup(Strict):
    """A small managed node group for controllers (CoreDNS, the Curvine CSI controller, routers; the Curvine masters run on the HyperPod worker groups)."""

    enabled: bool = True
    """On by default: CoreDNS and the controllers need somewhere to run before the GPU nodes join."""
    instance_type: str = platform.SYSTEM_NODE_INSTANCE_TYPE
    desired_size: int = platform.SYSTEM_NODE_COUNT


class Eks(Strict):
    cluster_name: str = Field(pattern=EKS_CLUSTER_NAME)
    """EKS cluster name."""
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    """A version HyperPod documents (the table in ``kvtiers/catalog/kubernetes.py``, with EKS's support dates); the
    kubectl layer package must match (``aws-cdk.lambda-layer-kubectl-vNN``). Synth warns while the version is in EKS
    extended support and refuses it after. Default: 1.34, the newest HyperPod documents."""
    endpoint_access: platform.EndpointAccess = platform.ENDPOINT_ACCESS
    """``private`` by default: the Kubernetes API is reachable only from inside the VPC (CDK's kubectl handler runs
    there). ``public_and_private`` also opens it to ``public_access_cidrs``, which must then be given."""
    public_access_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public endpoint; required with ``public_and_private`` (an explicit
    ``0.0.0.0/0`` is accepted, but never implied). Default: none."""
    admin_role_arns: tuple[Annotated[str, Field(pattern=IAM_ROLE_ARN)], ...] = ()
    """IAM roles that get cluster-admin access entries. Default: none (only the kubectl handler role)."""
    control_plane_logging: tuple[platform.ControlPlaneLogType, ...] = platform.CONTROL_PLANE_LOGGING
    addons: EksAddonVersions = EksAddonVersions()
    """Pinned versions of the managed core add-ons and the EBS CSI driver."""
    system_nodegroup: SystemNodegroup = SystemNodegroup()
    service_ipv4_cidr: str = "172.20.0.0/16"
    """Kubernetes Service addresses, set explicitly because the NetworkPolicies must name the ``kubernetes``
    Service's address (its first host). Default: what EKS picks for a VPC in 10.0.0.0/8; it must not overlap the
    VPC."""


# --------------------------------------------------------------------------------------------------- HyperPod


class Taint(Strict):
    key: str
    value: str = ""
    effect: platform.TaintEffect = platform.TAINT_EFFECT


class InstanceGroup(Strict):
    name: str = Field(pattern=SAGEMAKER_NAME)
    instance_type: G6eInstanceType
    count: int
    threads_per_core: platform.ThreadsPerCore = platform.THREADS_PER_CORE
    """2 (SMT on, every vCPU of the instance) by default, as G6e ships; 1 halves the CPUs each node offers."""
    ebs_volume_gb: int = platform.EBS_VOLUME_GB
    """Secondary EBS per node, mounted at /opt/sagemaker (container images, kubelet volumes, logs), encrypted with
    the stack key. 0: none, so /opt/sagemaker holds only what the AMI puts there (per AWS's EBS-CSI-on-HyperPod page,
    an LVM volume of the instance stores), which the Curvine worker's check then accepts."""
    deep_health_checks: tuple[platform.DeepHealthCheck, ...] | None = None
    """Deep health checks at node start. Default: the checks the instance type supports, ``InstanceStress`` and,
    where the type has EFA (ml.g6e.8xlarge and larger), ``InstanceConnectivity``, which a type without EFA refuses."""
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    """Custom node taints. AWS does not allow them on a group with deep health checks, so a group with taints
    needs ``deep_health_checks: []``."""
    max_pods: int | None = None
    """Pods a node admits, when ``kubectl get node -o jsonpath='{.status.allocatable.pods}'`` shows another figure
    than the EKS-optimized AMI's, which the placement check assumes by default (HyperPod's is not public)."""

    @property
    def shape(self) -> InstanceType:
        return G6E_INSTANCE_TYPES[self.instance_type]


class TieredStorage(Strict):
    enabled: bool = platform.TIERED_STORAGE_ENABLED
    """On by default, as in the source design. HyperPod reserves the memory on every node whether or not an endpoint
    uses it; only ``serving: operator`` endpoints with ``inference_operator.l2_backend: tieredstorage`` do, and synth
    says so when none does."""
    memory_percentage: int = platform.TIERED_STORAGE_MEMORY_PERCENTAGE
    """Share of each node's memory HyperPod reserves for tiered storage (the source design used 20 %). 0 to 100,
    the range of ``InstanceMemoryAllocationPercentage`` in the SageMaker API reference."""


class DependencyChart(Strict):
    """The HyperPod dependency Helm chart (aws/sagemaker-hyperpod-cli ``helm_chart/HyperPodHelmChart``)."""

    source: Literal["asset", "external"] = "asset"
    """``asset`` (default): ``make hyperpod-chart`` fetches it into ``vendor/`` and the platform stack deploys it
    before the HyperPod cluster; without it synth stops (except an offline review synth, which is undeployable).
    ``external``: you install it yourself between the two deploy stages docs/deploying.md describes."""
    revision: str = Field(default="011ca927123e02b35a399935bbb3ab1905fe33c7", pattern=r"^[0-9a-f]{40}$")
    """Commit of aws/sagemaker-hyperpod-cli that ``make hyperpod-chart`` checks out and verifies (the tip of main on
    2026-06-22, after the chart's last change on 2026-06-19)."""


class HyperPod(Strict):
    cluster_name: str = Field(pattern=SAGEMAKER_NAME)
    """HyperPod cluster name (changing it replaces the cluster)."""
    node_recovery: platform.NodeRecovery = platform.NODE_RECOVERY
    """``Automatic`` (default): HyperPod replaces unhealthy nodes without an operator."""
    tiered_storage: TieredStorage = TieredStorage()
    instance_groups: tuple[InstanceGroup, ...] = Field(min_length=1)
    dependency_chart: DependencyChart = DependencyChart()
    system_reserved_gib: int = platform.SYSTEM_RESERVED_GIB
    """Memory of every node kept for HyperPod's own processes outside Kubernetes, beyond the kernel's share and the
    kubelet's reserve (an estimate until a real node's allocatable is read)."""

    def group(self, name: str) -> InstanceGroup:
        groups = {g.name: g for g in self.instance_groups}
        check_instance_group("hyperpod", name, groups)
        return groups[name]


# --------------------------------------------------------------------------------------------------- Curvine


class CurvineImages(Strict):
    runtime_image: str = curvine.RUNTIME_IMAGE
    csi_image: str = curvine.CSI_IMAGE
    csi_provisioner_image: str = curvine.CSI_PROVISIONER_IMAGE
    csi_node_driver_registrar_image: str = curvine.CSI_NODE_DRIVER_REGISTRAR_IMAGE
    csi_livenessprobe_image: str = curvine.CSI_LIVENESSPROBE_IMAGE


class CurvinePorts(Strict):
    """Every Curvine port, set explicitly because the code and the docs disagree on the web-port defaults."""

    master_rpc: int = curvine.MASTER_RPC_PORT
    journal: int = curvine.JOURNAL_PORT
    worker_rpc: int = curvine.WORKER_RPC_PORT
    master_web: int = curvine.MASTER_WEB_PORT
    worker_web: int = curvine.WORKER_WEB_PORT
    fuse_web: int = curvine.FUSE_WEB_PORT


class CurvineMaster(Strict):
    replicas: int = 1
    """Raft group size, fixed at install (Curvine cannot resize the journal group in place)."""
    meta_volume_gib: int = platform.META_VOLUME_GIB
    journal_volume_gib: int = platform.JOURNAL_VOLUME_GIB
    volume_iops: int = GP3_MIN_IOPS
    volume_throughput_mibps: int = GP3_MIN_MIBPS
    snapshot_on_delete: bool = platform.SNAPSHOT_ON_DELETE
    """Removal policy: snapshot the journal volumes when the stack deletes them (default), else destroy."""
    audit_log: bool = curvine.AUDIT_LOG
    """Master audit log (Curvine's default is on): one log line per file operation, i.e. per LMCache chunk stored or
    looked up. Off by default: the RPC is unauthenticated, so the log names only the client host it trusts anyway."""


class CurvineWorker(Strict):
    nvme_mount: str = curvine.NVME_MOUNT
    """Where the node's NVMe instance store is mounted. The worker refuses to start unless this is a mount point of
    a filesystem on the instance store, so the cache never lands on the root disk. Default: the DLAMI path the
    source design used; AWS's EBS-CSI-on-HyperPod page also describes an LVM volume at ``/opt/sagemaker`` (which
    the check accepts when it includes the instance store): check with ``findmnt`` on a node."""
    data_dir: str = curvine.DATA_DIR
    """Cache directory, below ``nvme_mount`` (created on first start)."""
    capacity_gb: int = curvine.CAPACITY_GB
    """Cache capacity per worker; with ``reserved_gb`` it must fit the instance type's NVMe (the HyperPod cluster's
    placement check, at synth)."""
    reserved_gb: int = curvine.RESERVED_GB
    """Space Curvine leaves free on the disk (``dir_reserved``)."""


class CurvineEviction(Strict):
    """How the L2 makes room: LMCache's ``fs://`` connector never deletes, so something else must.

    Curvine v0.4.1's own quota eviction deletes only files whose TTL has expired (``quota_manager.rs`` hands each
    victim to ``ttl_executor.rs``), and a client TTL would expire the directories too (``fuse_utils.rs``
    ``mkdir_opts``), the L2 root and LMCache's temporary directories among them. So a janitor pod deletes the least
    recently used chunk files (by the access time the engines' L2 guard stamps after a read) when the stored bytes
    reach ``high_watermark`` of the workers' capacity, down to ``low_watermark``; it also deletes the files a lost
    Curvine worker left unreadable.
    """

    high_watermark: float = curvine.HIGH_WATERMARK
    low_watermark: float = curvine.LOW_WATERMARK
    policy: curvine.EvictionPolicy = curvine.EVICTION_POLICY
    """Curvine's own quota-eviction policy (kept configured; at v0.4.1 it only ever removes expired files)."""
    janitor_interval_seconds: int = curvine.JANITOR_INTERVAL_SECONDS
    """Seconds from the start of one janitor run to the next. Default: 10 minutes, so the L2 overshoots the high
    watermark by at most ten minutes of writes."""


class PodSize(Strict):
    cpu: str = Field(pattern=r"^\d+(\.\d+)?m?$")
    memory_gib: int = Field(ge=1)

    @classmethod
    def default(cls, container: str) -> PodSize:
        cpu, memory_gib = curvine.RESOURCES[container]
        return cls(cpu=cpu, memory_gib=memory_gib)


class CurvineResources(Strict):
    """Requests = limits for each Curvine container (Guaranteed QoS, so cache pods are not evicted first)."""

    master: PodSize = PodSize.default("master")
    worker: PodSize = PodSize.default("worker")
    """Counted against each GPU node's memory budget."""
    fuse: PodSize = PodSize.default("fuse")
    """The FUSE processes of a node (embedded in the CSI node plugin container, which gets this plus ``csi_node``);
    counted against each GPU node's memory budget."""
    csi_node: PodSize = PodSize.default("csi_node")
    csi_controller: PodSize = PodSize.default("csi_controller")
    sidecar: PodSize = PodSize.default("sidecar")


class Curvine(Strict):
    namespace: DnsLabel = curvine.NAMESPACE
    cluster_id: DnsLabel = curvine.CLUSTER_ID
    images: CurvineImages = CurvineImages()
    ports: CurvinePorts = CurvinePorts()
    master: CurvineMaster = CurvineMaster()
    worker: CurvineWorker = CurvineWorker()
    eviction: CurvineEviction = CurvineEviction()
    resources: CurvineResources = CurvineResources()
    block_size: str = Field(default=curvine.BLOCK_SIZE, pattern=r"^\d+(KB|MB|GB)$")
    """Curvine block size; 64 MB holds several 14 MiB LMCache chunks of a 7B model per block."""
    fs_path: AbsolutePath = curvine.FS_PATH
    """Curvine namespace path the StorageClass serves (``fs-path``)."""
    worker_group: str | None = None
    """Instance group that runs workers. Default: every HyperPod group."""


# --------------------------------------------------------------------------------------------------- serving


class S3ModelSource(Strict):
    type: Literal["s3"]
    bucket: str
    prefix: str = Field(pattern=r"^[^/].*[^/]$|^[^/]$")
    """Key prefix holding the weights (no leading or trailing slash); the pod role may read only this prefix."""
    revision: str | None = None
    """Version of the weights under the prefix (for example the Hugging Face commit they were copied from). Part
    of the L2 namespace: replacing the weights in place without changing it would let engines read the old model's
    KV. Default: none (``kvtiers plan`` shows the namespace as unpinned)."""


class HuggingFaceModelSource(Strict):
    type: Literal["huggingface"]
    token_secret: SecretName | None = None
    """Secrets Manager secret (name, in the environment's account and region) holding a Hugging Face token, for gated
    models; engines and a kvaware router read it as a file (``HF_TOKEN_PATH``). You create it before the first deploy
    (README, "First deploy"). Default: none (public model)."""
    revision: str | None = None
    """Model commit to pin. Default: the main branch at pod start."""


ModelSource = Annotated[S3ModelSource | HuggingFaceModelSource, Field(discriminator="type")]


class ServingImages(Strict):
    """Engine and router images. The engine image must be a row of the version matrix
    (:mod:`kvtiers.catalog.versions`), by ``repo:tag`` or ``repo:tag@sha256:<digest>`` (the digest pins the bytes, the
    tag names the row: the ``lmcache/vllm-openai`` release stage installs vLLM and LMCache unpinned, so a tag can be
    rebuilt): the file gives no LMCache version of its own, so the row is where the engines' comes from. The router
    image is checked by the router chart (kvaware needs a reviewed release)."""

    vllm_image: str = DEFAULT_ENGINE_IMAGE
    """vLLM with LMCache in one image (they must be ABI-matched); default: the newest engine image whose LMCache
    matches the router's (docs/serving.md, version matrix)."""
    router_image: str = DEFAULT_ROUTER_IMAGE
    """production-stack router; stable releases are published as ``lmcache/lmstack-router:v<version>``."""
    model_sync_image: str = serving_defaults.MODEL_SYNC_IMAGE
    """Init container that copies S3 weights to the pod (``aws s3 sync``)."""

    @field_validator("vllm_image")
    @classmethod
    def _in_the_version_matrix(cls, value: str) -> str:
        if engine_release(value) is None:
            raise ValueError(
                f"vllm_image {value!r} is not in the version matrix (kvtiers/catalog/versions.py); known: "
                f"{', '.join(ENGINE_IMAGES)} (optionally with @sha256:<digest>)"
            )
        return value

    @property
    def engine(self) -> EngineRelease:
        """What the engine image carries (vLLM, LMCache), from the version matrix."""
        release = engine_release(self.vllm_image)
        assert release is not None, "validated against the version matrix"
        return release


class ModelSizes(Strict):
    """Explicit sizes for a model that is not in the built-in table."""

    layers: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    parameters: float = Field(gt=0)


class Endpoint(Strict):
    name: DnsLabel
    model: str
    """Model id (``org/name``); the name vLLM serves and the model part of the L2 namespace (LMCache's own key holds
    the model *path*, which is per endpoint for S3 weights: see :class:`kvtiers.k8s_charts.l2.L2Namespace`)."""
    model_sizes: ModelSizes | None = None
    """Required when ``model`` is not in the sizing table. Default: the table's entry."""
    source: ModelSource
    serving: Literal["self_managed", "operator"] = "self_managed"
    instance_group: str
    replicas: int = serving_defaults.REPLICAS
    tensor_parallel_size: int = serving_defaults.TENSOR_PARALLEL_SIZE
    """GPUs of each pipeline stage. Above 2 on G6e (no NVLink) synth and ``kvtiers plan`` advise pipeline stages."""
    pipeline_parallel_size: int = serving_defaults.PIPELINE_PARALLEL_SIZE
    """Pipeline stages, each on ``tensor_parallel_size`` GPUs: a replica takes their product of its node's GPUs.
    vLLM's guidance for GPUs without NVLink (G6e's L40S) is stages over a large tensor-parallel size, for throughput
    under load (``kvtiers.parallelism``)."""
    dtype: Literal["bfloat16", "float16"] = serving_defaults.DTYPE
    gpu_memory_utilization: float = serving_defaults.GPU_MEMORY_UTILIZATION
    max_model_len: int = serving_defaults.MAX_MODEL_LEN
    l1_gib: int = serving_defaults.L1_GIB
    """LMCache L1 (``max_local_cpu_size``) per GPU worker, pinned host DRAM."""
    shm_gib: int = serving_defaults.SHM_GIB
    """Memory-backed /dev/shm (NCCL needs more than the 64 MiB default once TP > 1)."""
    vllm_overhead_gib: int = serving_defaults.VLLM_OVERHEAD_GIB
    """Host memory vLLM itself needs (Python, CUDA context, weight staging)."""
    cpu: int = serving_defaults.CPU
    l2: Literal["auto", "on", "off"] = "auto"
    expected_prompt_tokens: int = Field(default=2000, ge=1)
    """Typical prompt length; with ``l2: auto`` the L2 is used only at or above ``serving.l2_threshold_tokens``. With
    ``routing: kvaware`` it sets the router's ``--kv-aware-threshold`` together with ``kvaware_min_cached_tokens``."""
    kvaware_min_cached_tokens: int | None = Field(default=None, ge=1)
    """``routing: kvaware`` only: the shortest cached prefix, in tokens, for which a prompt of the expected length is
    routed to the engine holding it; shorter matches are routed by load. Rendered as ``--kv-aware-threshold =
    expected_prompt_tokens - kvaware_min_cached_tokens`` (production-stack vllm-stack-0.1.12 falls back to load when
    ``matched < len(prompt) - threshold``). Why a floor: LMCache 0.3.11's lookup names only the first-registered
    engine holding each chunk, so a prefix every engine holds (a shared system prompt) would send every request to that
    one engine. @default half of ``expected_prompt_tokens`` (a match shorter than half the prompt is most often such a
    shared prefix, which every engine also reads from the L2)"""
    routing: RoutingStrategy = "prefixaware"
    api: Literal["completions", "chat"] = serving_defaults.API
    """The OpenAI API the endpoint's clients call: ``chat`` (``/v1/chat/completions``, default) or ``completions``
    (``/v1/completions``). kvaware needs ``completions``: the router tokenizes only a completion's ``prompt``."""
    session_key: str | None = None
    """Header or JSON field with the session id. Required for ``routing: session``."""
    router_replicas: int = serving_defaults.ROUTER_REPLICAS
    """Default: 2, so that a router's rollout or its node's loss leaves one serving; 1 for ``kvaware``, whose LMCache
    controller lives in the router process (one router only)."""
    l2_share_group: DnsLabel | None = None
    """Share the L2 directory with the other endpoints of this group: each reads the chunks the others stored. Only
    for endpoints of the same model, weights location, revision, dtype, tensor-parallel size and serving path (the
    same L2 namespace fingerprint), checked at load. Default: none, so the endpoint's engines mount a directory of their own and no other endpoint
    can read or overwrite its KV cache."""
    internal_load_balancer: bool = False
    """Expose the router through an internal NLB as well as the ClusterIP Service. Default off."""
    allowed_clients: tuple[str, ...] | None = Field(default=None, min_length=1)
    """IPv4 CIDRs that may call the endpoint's router: its NetworkPolicy and, with ``internal_load_balancer``, the
    load balancer's source ranges. Self-managed endpoints only (the operator owns its load balancer's sources:
    refused by ``OperatorServingEndpoint``). Default: internal, the VPC's CIDR (``network.cidr``).
    ``kvtiers verify`` also reaches the router through the API server's proxy (the EKS subnets)."""
    api_key: bool | None = None
    """Clients must send ``Authorization: Bearer <key>``: kvtiers generates the endpoint's key in Secrets Manager
    (``kvtiers/<environment>/<endpoint>/api-key``, encrypted with the environment's serving-secrets KMS key) and
    delivers it to the engines and the router as a file. ``false`` serves without a key (anyone the NetworkPolicy
    admits may call it). Self-managed endpoints only: nothing checks a key on an operator endpoint, whose clients
    are authenticated only through its SageMaker endpoint (``InvokeEndpoint`` with IAM), so ``true`` is refused there
    (``OperatorServingEndpoint``). Default: on for self-managed endpoints."""
    startup_timeout_seconds: int = serving_defaults.STARTUP_TIMEOUT_SECONDS
    """Startup-probe budget: weight download plus load plus CUDA-graph capture."""
    ttft_p95_alert_seconds: float = Field(default=2.0, gt=0, le=600)
    """With ``observability.enabled``: alert when the endpoint's time-to-first-token p95 stays above this."""

    @model_validator(mode="before")
    @classmethod
    def _one_kvaware_router_by_default(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("routing") == "kvaware" and data.get("router_replicas") is None:
            return {**data, "router_replicas": 1}
        return data

    @model_validator(mode="after")
    def _checks(self) -> Endpoint:
        # What the file's own fields mean together; every deploy rule is the constructs' (kvtiers.config.model maps
        # the endpoint onto an Engine and a Router, and they refuse what does not work).
        if self.routing == "kvaware" and self.api != "completions":
            raise ValueError(
                f"routing 'kvaware' needs api: completions, got api: {self.api!r}: the production-stack router "
                "tokenizes only a completion's 'prompt' (chat requests always fall back to session/QPS routing), and "
                "AWS's Inference Operator needs invocationEndpoint /v1/completions for kvaware; use prefixaware or "
                "session for chat clients"
            )
        if self.kvaware_min_cached_tokens is not None:
            if self.routing != "kvaware":
                raise ValueError(
                    f"kvaware_min_cached_tokens applies to routing 'kvaware' only, not {self.routing!r}; remove it"
                )
            if self.kvaware_min_cached_tokens >= self.expected_prompt_tokens:
                raise ValueError(
                    f"kvaware_min_cached_tokens must be below expected_prompt_tokens ({self.expected_prompt_tokens}), "
                    f"got {self.kvaware_min_cached_tokens} (the router's threshold is their difference, at least 1)"
                )
        assert self.dtype in DTYPE_BYTES
        return self

    def l2_decision(self, threshold_tokens: int) -> tuple[bool, str]:
        """Whether the endpoint uses the L2, and why: ``l2``, or with ``auto`` its expected prompt against
        ``serving.l2_threshold_tokens`` (both serving paths)."""
        if self.l2 == "on":
            return True, "l2: on"
        if self.l2 == "off":
            return False, "l2: off"
        if self.expected_prompt_tokens >= threshold_tokens:
            return True, f"auto: expected prompt {self.expected_prompt_tokens} >= threshold {threshold_tokens} tokens"
        return False, (
            f"auto: expected prompt {self.expected_prompt_tokens} < threshold {threshold_tokens} tokens "
            "(the L2 round trip costs about as much as recompute)"
        )

    @property
    def authenticated(self) -> bool:
        """Whether clients need the endpoint's API key (``api_key``, default on for self-managed endpoints)."""
        return self.api_key if self.api_key is not None else self.serving == "self_managed"

    @property
    def hf_token_secret(self) -> str | None:
        """The Secrets Manager secret with the Hugging Face token, whichever source names it."""
        return self.source.token_secret if isinstance(self.source, HuggingFaceModelSource) else None

    @property
    def kv_aware_threshold(self) -> int | None:
        """``routing: kvaware``: the router's ``--kv-aware-threshold`` (see ``kvaware_min_cached_tokens``); else None."""
        if self.routing != "kvaware":
            return None
        min_cached = self.kvaware_min_cached_tokens or max(self.expected_prompt_tokens // 2, 1)
        return max(self.expected_prompt_tokens - min_cached, 1)

    @property
    def shape(self) -> ModelShape | None:
        """The model's sizes: ``model_sizes`` when given, else the built-in table's entry (None for another model:
        the engine refuses it without sizes)."""
        if self.model_sizes is not None:
            sizes = self.model_sizes
            return ModelShape(sizes.layers, sizes.kv_heads, sizes.head_dim, sizes.parameters)
        return KNOWN_MODELS.get(self.model)


class Serving(Strict):
    namespace: DnsLabel = serving_defaults.NAMESPACE
    hash_seed: str = Field(default=serving_defaults.HASH_SEED, pattern=r"^\d{1,10}$")
    """``PYTHONHASHSEED`` shared by every engine and router on the L2: without one seed, cross-pod hits are zero."""
    l2_threshold_tokens: int = Field(default=1000, ge=0)
    """``l2: auto`` turns the L2 on at or above this prompt length (below it the source design measured the L2
    round trip costing as much as recompute: 0.99x at 500 tokens)."""
    l2_mount_path: AbsolutePath = DEFAULT_MOUNT_PATH
    """Where the Curvine L2 claim is mounted in serving pods; LMCache's ``remote_url`` path is derived from it."""
    l2_claim_name: DnsLabel = curvine.CLAIM_NAME
    l2_claim_size_gib: int = Field(default=curvine.CLAIM_SIZE_GIB, ge=1)
    """Nominal (Curvine does not enforce it); capacity comes from the workers."""
    images: ServingImages = ServingImages()
    endpoints: tuple[Endpoint, ...] = ()


# --------------------------------------------------------------------------------------------------- operator


class OperatorAddonVersions(Strict):
    """Pinned EKS add-on versions of the HyperPod Inference Operator and its prerequisites."""

    inference_operator: str = platform.INFERENCE_OPERATOR_VERSION
    """``amazon-sagemaker-hyperpod-inference``. This version ships the operator CRD of chart 2.0.0 (no
    ``spec.kubernetes``); the endpoint spec uses only fields of the versions listed in docs/operator-contract.md, and
    any other version is refused. ``v1.3.0-eksbuild.1`` is refused while an operator endpoint has no Curvine L2 (its
    operator drops the worker's ``LMCACHE_*`` variables, which only the L2's policy restores)."""
    cert_manager: str = platform.CERT_MANAGER_VERSION

    s3_csi_driver: str = platform.S3_CSI_DRIVER_VERSION
    fsx_csi_driver: str = platform.FSX_CSI_DRIVER_VERSION
    metrics_server: str = platform.METRICS_SERVER_VERSION


class InferenceOperator(Strict):
    """Settings for endpoints with ``serving: operator`` (used only when at least one exists)."""

    addons: OperatorAddonVersions = OperatorAddonVersions()
    kyverno_chart_version: str = Field(default=platform.KYVERNO_CHART_VERSION, pattern=r"^\d+\.\d+\.\d+$")
    """Kyverno Helm chart that mutates operator pods to mount the Curvine L2."""
    l2_backend: Literal["curvine", "tieredstorage"] = "curvine"
    """``curvine``: the shared NVMe L2 attached by the admission policy (default, cross-node hits).
    ``tieredstorage``: the operator's native node-local HyperPod tiered storage; refused for endpoints with the L2 on
    until the L2 guard can be attached to it (an unreadable chunk would give wrong output)."""


# --------------------------------------------------------------------------------------------------- observability


class Observability(Strict):
    """Metrics collection (Amazon Managed Service for Prometheus and its managed collector), recording and alert
    rules, and alerts to an SNS topic. Default: off."""

    enabled: bool = False
    alert_topic_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,256}$")
    """SNS topic the workspace's alert manager publishes to (created with the stack). Default: ``<name>-alerts``."""
    scrape_interval_seconds: int = Field(default=30, ge=10, le=300)
    l2_nearly_full_ratio: float = Field(default=0.95, gt=0, lt=1)
    """Alert when the Curvine L2 stays above this fraction of its capacity (eviction should keep it near
    ``curvine.eviction.high_watermark``); must be above that watermark."""
    l2_hit_collapse_ratio: float = Field(default=0.5, gt=0, lt=1)
    """Alert when an endpoint's L2 hit ratio over 15 minutes falls below this fraction of its 6-hour ratio."""


# --------------------------------------------------------------------------------------------------- change


class IntendedDeletion(Strict):
    """A deletion this change means to make of something that holds data or a client-facing name (a LoadBalancer
    Service, a claim, a Secret, an operator endpoint, a Secrets Manager secret, an EBS volume...): ``kvtiers diff``
    reports it as an error unless it is named here. Remove the entry once the change is deployed: an entry that
    matches no deletion is an error too, so that it cannot hide a later loss (docs/change-model.md)."""

    target: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9:.-]* [A-Za-z0-9][A-Za-z0-9./_-]*$")
    """The deleted object exactly as the "Deleted" section of ``kvtiers diff`` names it: ``<Kind>[.<group>]
    [<namespace>/]<name>`` for a Kubernetes object (``Service serving/qwen25-32b-router-nlb``), ``<type>
    <stack>/<logical ID>`` for a CloudFormation resource."""
    reason: str = Field(min_length=1)
    """Why the loss is intended, for the reviewer (what clients or operators do about it)."""


# --------------------------------------------------------------------------------------------------- root


class Environment(Strict):
    """One deployable environment: where, what cluster, which cache tiers and which endpoints."""

    name: DnsLabel
    """Environment name; prefixes stack names (``<name>-network``...)."""
    account: str = Field(pattern=r"^\d{12}$")
    """AWS account ID (explicit per environment, so synth and diff are deterministic)."""
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    """AWS region, for example ``us-east-1``."""
    tags: dict[str, str] = {}
    """Tags on every stack and resource. Default: none beyond ``kvtiers:environment``."""
    network: Network
    """``mode: new`` (a VPC the stack creates) or ``mode: existing`` (imported by IDs)."""
    eks: Eks
    """The EKS cluster HyperPod is orchestrated by."""
    hyperpod: HyperPod
    """The HyperPod cluster and its G6e instance groups."""
    curvine: Curvine = Curvine()
    """The Curvine L2 cache. Default: one master, a worker on every HyperPod node."""
    serving: Serving = Serving()
    """Model endpoints and the settings they share. Default: no endpoints."""
    inference_operator: InferenceOperator = InferenceOperator()
    """Settings of the HyperPod Inference Operator path (``serving: operator`` endpoints)."""
    observability: Observability = Observability()
    """Metrics, rules, alerts and the dashboard's data source. Default: off."""
    intended_deletions: tuple[IntendedDeletion, ...] = ()
    """Deletions of this change that lose data or a client-facing name on purpose, each named as ``kvtiers diff``
    reports it. Default: none, so every such deletion is an error."""

    def api_key_secret_name(self, endpoint: str) -> str:
        """The Secrets Manager secret with ``endpoint``'s API keys (the stack creates it; ``kvtiers bench`` and
        ``verify`` read it)."""
        return f"kvtiers/{self.name}/{endpoint}/api-key"

    @property
    def serving_secrets_key_alias(self) -> str:
        """The KMS key that encrypts the serving secrets (API keys, and the Hugging Face token you create)."""
        return f"alias/kvtiers/{self.name}/serving-secrets"

    @property
    def serving_secrets(self) -> bool:
        """Whether any self-managed endpoint reads a secret (an API key or a Hugging Face token): the platform then
        installs ASCP and the serving-secrets key."""
        return any(
            e.serving == "self_managed" and (e.authenticated or e.hf_token_secret) for e in self.serving.endpoints
        )

    @model_validator(mode="after")
    def _cross_checks(self) -> Environment:
        # Rules about the file's own fields that map onto no construct prop; every deploy rule is the constructs'.
        if (
            self.observability.enabled
            and self.observability.l2_nearly_full_ratio <= self.curvine.eviction.high_watermark
        ):
            raise ValueError(
                f"observability.l2_nearly_full_ratio {self.observability.l2_nearly_full_ratio} must be above "
                f"curvine.eviction.high_watermark {self.curvine.eviction.high_watermark} (eviction keeps the L2 there)"
            )
        operator = [e for e in self.serving.endpoints if e.serving == "operator"]
        if (
            operator
            and self.inference_operator.l2_backend == "tieredstorage"
            and not self.hyperpod.tiered_storage.enabled
        ):
            raise ValueError(
                f"serving.endpoints {[e.name for e in operator]}: serving 'operator' with inference_operator.l2_backend "
                "'tieredstorage' needs hyperpod.tiered_storage.enabled: true"
            )
        targets = [d.target for d in self.intended_deletions]
        repeated = sorted({t for t in targets if targets.count(t) > 1})
        if repeated:
            raise ValueError(f"intended_deletions names {repeated} more than once; keep one entry each")
        operator_l2 = [e.name for e in operator if e.l2_decision(self.serving.l2_threshold_tokens)[0]]
        if operator_l2 and self.inference_operator.l2_backend == "tieredstorage":
            raise ValueError(
                f"inference_operator.l2_backend: 'tieredstorage' is refused for {operator_l2}: the operator configures "
                "that L2 itself, so kvtiers cannot attach the L2 guard, and LMCache 0.3.11 turns a chunk that backend "
                "fails to return into wrong output (docs/serving-contract.md, L2 read failures); use 'curvine' "
                "(the default), or l2: off"
            )
        return self

    _derived: dict[str, object] = PrivateAttr(default_factory=dict)

    @property
    def derived(self) -> dict[str, object]:
        """What :mod:`kvtiers.config.model` derives from this environment, computed once (its sizing)."""
        return self._derived

    @property
    def tiered_storage_unused(self) -> bool:
        """HyperPod reserves tiered-storage memory that no endpoint reads (only the operator's backend uses it)."""
        uses = self.inference_operator.l2_backend == "tieredstorage" and any(
            e.serving == "operator" for e in self.serving.endpoints
        )
        return self.hyperpod.tiered_storage.enabled and not uses

    @property
    def alert_topic_name(self) -> str:
        return self.observability.alert_topic_name or f"{self.name}-alerts"

    @property
    def curvine_worker_groups(self) -> tuple[InstanceGroup, ...]:
        if self.curvine.worker_group is None:
            return self.hyperpod.instance_groups
        return (self.hyperpod.group(self.curvine.worker_group),)
