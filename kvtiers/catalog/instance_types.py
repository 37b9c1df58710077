"""The HyperPod G6e instance sizes this project can schedule on.

The GPU, vCPU and memory figures are the published G6e shapes (NVIDIA L40S, 48 GB per GPU; vCPUs at EC2's default two
threads per core), as aws/karpenter-provider-aws lists them (``website/content/en/preview/reference/
instance-types.md``). The local NVMe sizes are the EC2 instance-store totals; confirm them for your account with
``aws ec2 describe-instance-types --instance-types g6e.12xlarge --query 'InstanceTypes[0].InstanceStorageInfo'``
before sizing the Curvine L2 close to the limit. ``max_pods`` is the EKS-optimized AMI's (the VPC CNI's ENI formula,
awslabs/amazon-eks-ami ``nodeadm/internal/kubelet/eni-max-pods.txt``); HyperPod's own setting is not public and one
user report shows it lower (``docs/placement-contract.md``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

GPU_MEMORY_GIB = 44.5
"""Usable memory of one NVIDIA L40S: 48 GB (decimal, 44.7 GiB) on the data sheet, of which about 44.5 GiB is usable
after the driver's own reservation. vLLM's ``gpu_memory_utilization`` is a share of this figure, not of 48 GiB."""


@dataclass(frozen=True)
class InstanceType:
    """One ``ml.g6e.*`` size."""

    name: str
    gpus: int
    vcpus: int
    """vCPUs at two threads per core (EC2's default for G6e)."""
    memory_gib: int
    nvme_gb: int
    efa: bool
    max_pods: int
    """Pods the kubelet admits (the EKS-optimized AMI's ENI formula)."""
    nvlink: bool = False
    """GPUs joined by NVLink. G6e's L40S have none: tensor parallelism all-reduces over PCIe."""


G6E_INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("ml.g6e.xlarge", gpus=1, vcpus=4, memory_gib=32, nvme_gb=250, efa=False, max_pods=58),
        InstanceType("ml.g6e.2xlarge", gpus=1, vcpus=8, memory_gib=64, nvme_gb=450, efa=False, max_pods=58),
        InstanceType("ml.g6e.4xlarge", gpus=1, vcpus=16, memory_gib=128, nvme_gb=600, efa=False, max_pods=234),
        InstanceType("ml.g6e.8xlarge", gpus=1, vcpus=32, memory_gib=256, nvme_gb=900, efa=True, max_pods=234),
        InstanceType("ml.g6e.16xlarge", gpus=1, vcpus=64, memory_gib=512, nvme_gb=1900, efa=True, max_pods=737),
        InstanceType("ml.g6e.12xlarge", gpus=4, vcpus=48, memory_gib=384, nvme_gb=3800, efa=True, max_pods=292),
        InstanceType("ml.g6e.24xlarge", gpus=4, vcpus=96, memory_gib=768, nvme_gb=3800, efa=True, max_pods=492),
        InstanceType("ml.g6e.48xlarge", gpus=8, vcpus=192, memory_gib=1536, nvme_gb=7600, efa=True, max_pods=492),
    )
}


def check_instance_group(where: str, name: str, groups: Collection[str]) -> None:
    """Refuse an endpoint on an instance group the HyperPod cluster does not have (its pods would never schedule)."""
    if name not in groups:
        raise ValueError(f"{where}: instance_group {name!r} is not a HyperPod instance group (one of {sorted(groups)})")
