"""The HyperPod G6e instance sizes this project can schedule on.

The GPU, vCPU and memory figures are the published G6e shapes (NVIDIA L40S, 48 GB per GPU). The local NVMe
sizes are the EC2 instance-store sizes; confirm them for your account with
``aws ec2 describe-instance-types --instance-types g6e.12xlarge --query 'InstanceTypes[0].InstanceStorageInfo'``
before sizing the Curvine L2 close to the limit.
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
    memory_gib: int
    nvme_gb: int
    efa: bool


G6E_INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("ml.g6e.xlarge", gpus=1, vcpus=4, memory_gib=32, nvme_gb=250, efa=False),
        InstanceType("ml.g6e.2xlarge", gpus=1, vcpus=8, memory_gib=64, nvme_gb=450, efa=False),
        InstanceType("ml.g6e.4xlarge", gpus=1, vcpus=16, memory_gib=128, nvme_gb=600, efa=False),
        InstanceType("ml.g6e.8xlarge", gpus=1, vcpus=32, memory_gib=256, nvme_gb=900, efa=True),
        InstanceType("ml.g6e.16xlarge", gpus=1, vcpus=64, memory_gib=512, nvme_gb=1900, efa=True),
        InstanceType("ml.g6e.12xlarge", gpus=4, vcpus=48, memory_gib=384, nvme_gb=3800, efa=True),
        InstanceType("ml.g6e.24xlarge", gpus=4, vcpus=96, memory_gib=768, nvme_gb=3800, efa=True),
        InstanceType("ml.g6e.48xlarge", gpus=8, vcpus=192, memory_gib=1536, nvme_gb=7600, efa=True),
    )
}


def check_instance_group(where: str, name: str, groups: Collection[str]) -> None:
    """Refuse an endpoint on an instance group the HyperPod cluster does not have (its pods would never schedule)."""
    if name not in groups:
        raise ValueError(f"{where}: instance_group {name!r} is not a HyperPod instance group (one of {sorted(groups)})")


def check_tensor_parallel_size(where: str, tensor_parallel_size: int, instance: InstanceType) -> None:
    """Refuse more GPUs per pod than the instance has (the pod would never schedule)."""
    if tensor_parallel_size > instance.gpus:
        raise ValueError(
            f"{where}: tensor_parallel_size {tensor_parallel_size} is larger than the "
            f"{instance.gpus} GPU(s) of {instance.name}"
        )


def tiered_storage_gib(instance: InstanceType, *, enabled: bool, memory_percentage: int) -> float:
    """Node memory HyperPod tiered storage takes for itself: no pod may use it."""
    return instance.memory_gib * memory_percentage / 100 if enabled else 0.0


def check_pod_memory(where: str, pod_memory_gib: int, instance: InstanceType, *, tiered_storage_gib: float) -> None:
    """Refuse a pod larger than the instance's memory less the tiered-storage share (it would never schedule)."""
    free = instance.memory_gib - tiered_storage_gib
    if pod_memory_gib > free:
        raise ValueError(
            f"{where}: a pod of {pod_memory_gib} GiB does not fit the {instance.memory_gib} GiB of {instance.name}: "
            f"tiered storage {tiered_storage_gib:.1f} GiB leaves {free:.1f} GiB; lower l1_gib or the tiered-storage share"
        )
