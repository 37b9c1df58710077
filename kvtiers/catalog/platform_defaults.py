"""Defaults and closed value sets of the platform constructs' arguments (``kvtiers.constructs``).

Free of CDK imports, so that the environment schema reads the same values without loading aws-cdk-lib: each
default below is the one home of that value, for the constructs and for the environment file.
"""

from __future__ import annotations

from typing import Literal

# --------------------------------------------------------------------------------------------------- network

VPC_CIDR = "10.192.0.0/16"
"""A /16: room for the /24 EKS subnets and a large HyperPod subnet."""
EKS_AVAILABILITY_ZONES = ("us-east-1a", "us-east-1b")
"""Two us-east-1 zones for the EKS subnets (EKS needs two)."""
HYPERPOD_SUBNET_CIDR = "10.192.64.0/18"
"""A /18, because every HyperPod pod takes a VPC IP through the VPC CNI."""
NAT_GATEWAYS = 1
"""One NAT gateway (cost); two for AZ-independent egress."""
AZ_ID_PATTERN = r"^[a-z]{2,4}\d-az\d+$"
"""An availability zone ID such as ``use1-az2`` (not a zone name such as ``us-east-1a``)."""

# --------------------------------------------------------------------------------------------------- EKS

EndpointAccess = Literal["public_and_private", "private"]
ENDPOINT_ACCESS: EndpointAccess = "private"
"""The Kubernetes API is reachable only inside the VPC."""
ControlPlaneLogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
CONTROL_PLANE_LOGGING: tuple[ControlPlaneLogType, ...] = ("api", "audit", "authenticator")
"""The log types needed to audit who changed what."""
SYSTEM_NODE_INSTANCE_TYPE = "m7i.xlarge"
"""4 vCPU / 16 GiB, enough for CoreDNS, the CSI controller and the routers."""
SYSTEM_NODE_COUNT = 2
"""Two nodes, so controllers survive one node's loss."""
EKS_CLUSTER_NAME_PATTERN = r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$"
IAM_ROLE_ARN_PATTERN = r"^arn:aws[a-z\-]*:iam::\d{12}:role/[a-zA-Z_0-9+=,.@\-/]+$"
ADDON_VERSION_PATTERN = r"^v\d+\.\d+\.\d+-eksbuild\.\d+$"
"""An exact EKS add-on version such as ``v1.20.4-eksbuild.1``: pinned, never resolved at synth."""
MIN_VPC_CNI_VERSION = (1, 18, 3)
"""The oldest VPC CNI HyperPod supports."""
MIN_EBS_CSI_DRIVER_VERSION = (1, 47, 0)
"""The first EBS CSI driver that attaches volumes to HyperPod nodes (``AttachClusterNodeVolume``)."""

# Pinned EKS add-on versions for the default Kubernetes 1.34 (``aws eks describe-addon-versions --kubernetes-version
# 1.34``; sources in docs/aws-prerequisites.md). Pinned, never resolved at synth, so that ``cdk diff`` shows every
# upgrade; change them with the Kubernetes version.
VPC_CNI_VERSION = "v1.21.1-eksbuild.3"
COREDNS_VERSION = "v1.13.2-eksbuild.4"
KUBE_PROXY_VERSION = "v1.34.3-eksbuild.2"
"""kube-proxy's minor version is the cluster's."""
EKS_POD_IDENTITY_AGENT_VERSION = "v1.3.9-eksbuild.3"
EBS_CSI_DRIVER_VERSION = "v1.50.1-eksbuild.1"
SECRETS_STORE_CSI_PROVIDER_VERSION = "v3.1.1-eksbuild.1"
"""``aws-secrets-store-csi-driver-provider`` (ASCP: the Secrets Store CSI driver 1.6.0 and the AWS provider 3.1.1, chart
``secrets-store-csi-driver-provider-aws`` 3.1.1). AWS listed this build for Kubernetes 1.35 and 1.36; that it is
offered for 1.34 is unconfirmed (docs/aws-prerequisites.md has the command that answers it)."""
SECRETS_ROTATION_POLL_INTERVAL = "120s"
"""How old a pod's mounted secret files must be before the CSI driver fetches them again (``rotationPollInterval``),
the driver's own default. The kubelet asks the driver to remount about once a minute; the driver skips the fetch
while the mount is younger than this, and rewrites nothing when the value is unchanged, so a pod's files stop
ageing after their last change (v1.6.0 ``pkg/secrets-store/nodeserver.go``, ``pkg/util/fileutil/atomic_writer.go``).
The interval therefore bounds how long a key change takes to reach the router's and the engines' checks, which
re-read the file, and not the steady-state cost: one ``DescribeSecret`` per pod and secret per remount whatever it is
(the AWS provider's README suggests an hour for cost, which only delays a second change by that long)."""

# The HyperPod Inference Operator add-on and its prerequisites, pinned likewise (docs/operator-contract.md).
INFERENCE_OPERATOR_VERSION = "v1.0.0-eksbuild.1"
"""``amazon-sagemaker-hyperpod-inference``: ships the operator CRD of chart 2.0.0 (no ``spec.kubernetes``); the
endpoint spec uses only fields of the versions listed in docs/operator-contract.md."""
CERT_MANAGER_VERSION = "v1.18.2-eksbuild.2"
S3_CSI_DRIVER_VERSION = "v1.14.1-eksbuild.1"
FSX_CSI_DRIVER_VERSION = "v1.7.0-eksbuild.1"
METRICS_SERVER_VERSION = "v0.8.0-eksbuild.2"
KYVERNO_CHART_VERSION = "3.5.2"
"""The Kyverno Helm chart that mutates operator pods to mount the Curvine L2."""

# --------------------------------------------------------------------------------------------------- HyperPod

SAGEMAKER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
"""A SageMaker resource name: the HyperPod cluster and its instance groups."""
NodeRecovery = Literal["Automatic", "None"]
NODE_RECOVERY: NodeRecovery = "Automatic"
"""HyperPod replaces unhealthy nodes without an operator."""
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECT: TaintEffect = "NoSchedule"
"""Only pods that tolerate the taint run on the group."""
REPELLING_TAINT_EFFECTS: frozenset[TaintEffect] = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep pods without a toleration off a node (``PreferNoSchedule`` only prefers)."""
DeepHealthCheck = Literal["InstanceStress", "InstanceConnectivity"]
DEEP_HEALTH_CHECKS: tuple[DeepHealthCheck, ...] = ("InstanceStress", "InstanceConnectivity")
"""Every deep health check at node start; a type without EFA runs ``InstanceStress`` only (``InstanceGroup``)."""
ThreadsPerCore = Literal[1, 2]
THREADS_PER_CORE: ThreadsPerCore = 2
"""SMT on, as G6e instances ship (EC2's default CPU options: two threads per core): every vCPU of the instance table.
1 halves the CPUs a node offers (EC2 ``CpuOptions``: "specify a value of 1 to disable multithreading") and pays off
for tightly coupled training that pins one process per physical core; kvtiers' pods pin no cores (no static CPU
manager policy) and their CPU work (vLLM's API server, scheduler and tokenizer, Curvine's FUSE and worker) is many
threads that gain from SMT, so 1 needs a reason of the group's own."""
SYSTEM_RESERVED_GIB = 2
"""Memory of a HyperPod node kept for HyperPod's own processes outside Kubernetes (its cluster and SSM agents), beyond
the kernel's share and the kubelet's reserve, which the placement model counts on their own. Not public: an
estimate, until a real node's ``status.allocatable`` is read."""
EBS_VOLUME_GB = 500
"""Secondary EBS per node, mounted at /opt/sagemaker: images, kubelet volumes and logs."""
MAX_EBS_VOLUME_GB = 16384
TIERED_STORAGE_ENABLED = True
"""On, as in the source design; only the Inference Operator's ``tieredstorage`` KV backend reads this memory tier,
not kvtiers' own serving paths (HyperPodCluster says so in an info annotation)."""
TIERED_STORAGE_MEMORY_PERCENTAGE = 20
"""20 % of node memory, the value the source design measured with."""

# --------------------------------------------------------------------------------------------------- journal volumes

MasterCount = Literal[1, 3, 5]
"""An odd Raft quorum, fixed at install."""
META_VOLUME_GIB = 20
"""RocksDB metadata, ample for millions of LMCache chunk files."""
JOURNAL_VOLUME_GIB = 50
"""Raft log between snapshots."""
SNAPSHOT_ON_DELETE = True
"""Snapshot on stack deletion, so the L2 namespace metadata can be restored."""
