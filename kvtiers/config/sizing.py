"""Derived facts of an environment: memory budgets, GPU placement, cache capacity per tier and the L2 decision.

This is the only place these numbers are computed. Synth-time validation, the charts (pod memory requests and
limits, LMCache's L1 size) and ``kvtiers plan`` all read the :class:`EnvironmentSizing` built here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtiers.config.instance_types import GPU_MEMORY_GIB
from kvtiers.config.models import KNOWN_MODELS, ModelShape

if TYPE_CHECKING:
    from kvtiers.config.schema import Endpoint, Environment, InstanceGroup

GIB = 1024**3
GB = 1000**3
ACTIVATION_RESERVE_GIB = 2
"""GPU memory per GPU that vLLM keeps for activations and CUDA graphs beyond the weights (an estimate)."""
VLLM_HOST_GIB_PER_EXTRA_RANK = 4
"""Host memory of each tensor-parallel worker process beyond the first (its own Python, CUDA context and pinned
staging buffers): vLLM runs one process per GPU, so its host overhead grows with the tensor-parallel size."""
MODEL_DISK_HEADROOM = 1.1
"""Model emptyDir limit = weights x this + ``MODEL_DISK_EXTRA_GIB`` (tokenizer, configs, shard rounding)."""
MODEL_DISK_EXTRA_GIB = 2


@dataclass(frozen=True)
class EndpointSizing:
    name: str
    model: str
    kv_bytes_per_token: int
    weight_bytes: int
    gpus_per_replica: int
    l0_tokens: int
    """GPU prefix-cache capacity per replica after weights at the configured utilization."""
    l1_bytes: int
    """LMCache L1 pool per replica: ``l1_gib`` per GPU worker."""
    l1_tokens: int
    l2_enabled: bool
    l2_reason: str
    pod_memory_gib: int
    """Pod memory request = limit: the L1 pool + vLLM itself + the memory-backed /dev/shm."""
    pods_per_node: int
    """Replicas per node when spread evenly over the group's nodes."""
    vllm_host_gib: int = 0
    """vLLM's host memory in the pod: ``vllm_overhead_gib`` plus ``VLLM_HOST_GIB_PER_EXTRA_RANK`` per extra GPU."""
    model_disk_gib: int = 0
    """Size limit of the pod's model directory (node ephemeral storage)."""


@dataclass(frozen=True)
class NodeBudget:
    group: str
    instance_type: str
    memory_gib: int
    tiered_storage_gib: float
    reserved_gib: int
    curvine_gib: int
    pods_gib: int
    """Endpoint pods on the fullest node: its GPUs given to the pods with the most host memory per GPU."""
    gpus: int
    gpus_used: int
    """GPUs per node the endpoints need, spread evenly over the group's nodes."""

    @property
    def free_gib(self) -> float:
        return self.memory_gib - self.tiered_storage_gib - self.reserved_gib - self.curvine_gib - self.pods_gib


@dataclass(frozen=True)
class EnvironmentSizing:
    endpoints: tuple[EndpointSizing, ...]
    nodes: tuple[NodeBudget, ...]
    l2_capacity_bytes: int
    """Usable Curvine capacity across workers (up to the eviction high watermark)."""
    curvine_workers: int

    def endpoint(self, name: str) -> EndpointSizing:
        return next(e for e in self.endpoints if e.name == name)

    def l2_tokens(self, endpoint: str) -> int:
        return self.l2_capacity_bytes // self.endpoint(endpoint).kv_bytes_per_token


def model_shape(endpoint: Endpoint) -> ModelShape:
    if endpoint.model_sizes is not None:
        sizes = endpoint.model_sizes
        return ModelShape(sizes.layers, sizes.kv_heads, sizes.head_dim, sizes.parameters)
    return KNOWN_MODELS[endpoint.model]


def l2_decision(endpoint: Endpoint, threshold_tokens: int) -> tuple[bool, str]:
    """The per-endpoint L2 policy, shared by the self-managed and the operator serving paths."""
    if endpoint.l2 == "on":
        return True, "l2: on"
    if endpoint.l2 == "off":
        return False, "l2: off"
    if endpoint.expected_prompt_tokens >= threshold_tokens:
        return True, f"auto: expected prompt {endpoint.expected_prompt_tokens} >= threshold {threshold_tokens} tokens"
    return False, (
        f"auto: expected prompt {endpoint.expected_prompt_tokens} < threshold {threshold_tokens} tokens "
        "(the L2 round trip costs about as much as recompute)"
    )


def _size_endpoint(env: Environment, index: int, endpoint: Endpoint, group: InstanceGroup) -> EndpointSizing:
    shape = model_shape(endpoint)
    kv = shape.kv_bytes_per_token(endpoint.dtype)
    weights = shape.weight_bytes(endpoint.dtype)
    tp = endpoint.tensor_parallel_size
    usable_gpu = tp * (GPU_MEMORY_GIB * endpoint.gpu_memory_utilization - ACTIVATION_RESERVE_GIB) * GIB
    if usable_gpu <= weights:
        raise ValueError(
            f"serving.endpoints.{index} ({endpoint.name}): {endpoint.model} weights need "
            f"{weights / GIB:.1f} GiB but {tp} GPU(s) at gpu_memory_utilization {endpoint.gpu_memory_utilization} "
            f"give {usable_gpu / GIB:.1f} GiB; raise tensor_parallel_size"
        )
    l1_bytes = endpoint.l1_gib * tp * GIB
    vllm_host_gib = vllm_host_memory_gib(endpoint)
    l2_enabled, reason = l2_decision(endpoint, env.serving.l2_threshold_tokens)
    return EndpointSizing(
        name=endpoint.name,
        model=endpoint.model,
        kv_bytes_per_token=kv,
        weight_bytes=weights,
        gpus_per_replica=tp,
        l0_tokens=int((usable_gpu - weights) // kv),
        l1_bytes=l1_bytes,
        l1_tokens=l1_bytes // kv,
        l2_enabled=l2_enabled,
        l2_reason=reason,
        pod_memory_gib=endpoint.l1_gib * tp + vllm_host_gib + endpoint.shm_gib,
        pods_per_node=math.ceil(endpoint.replicas / group.count),
        vllm_host_gib=vllm_host_gib,
        model_disk_gib=math.ceil(weights / GIB * MODEL_DISK_HEADROOM) + MODEL_DISK_EXTRA_GIB,
    )


def vllm_host_memory_gib(endpoint: Endpoint) -> int:
    return endpoint.vllm_overhead_gib + VLLM_HOST_GIB_PER_EXTRA_RANK * (endpoint.tensor_parallel_size - 1)


def size_environment(env: Environment) -> EnvironmentSizing:
    """Compute every derived fact and raise ``ValueError`` (with the numbers) when the config does not fit."""
    groups = {g.name: g for g in env.hyperpod.instance_groups}
    sized = tuple(_size_endpoint(env, i, e, groups[e.instance_group]) for i, e in enumerate(env.serving.endpoints))
    worker_groups = {g.name for g in env.curvine_worker_groups}
    res = env.curvine.resources
    nodes = []
    for group in env.hyperpod.instance_groups:
        shape = group.shape
        on_group = [(e, s) for e, s in zip(env.serving.endpoints, sized) if e.instance_group == group.name]
        tiered = shape.memory_gib * env.hyperpod.tiered_storage.memory_percentage / 100
        # The scheduler packs pods by GPU. A node is fullest when its GPUs go to the pods that need the most host
        # memory per GPU, so that is the node the budget checks: if it fits, every GPU-feasible placement fits.
        gpus_demanded = sum(e.replicas * s.gpus_per_replica for e, s in on_group)
        gpus_per_node = min(shape.gpus, math.ceil(gpus_demanded / group.count))
        memory_per_gpu = max((s.pod_memory_gib / s.gpus_per_replica for _, s in on_group), default=0)
        budget = NodeBudget(
            group=group.name,
            instance_type=group.instance_type,
            memory_gib=shape.memory_gib,
            tiered_storage_gib=tiered if env.hyperpod.tiered_storage.enabled else 0.0,
            reserved_gib=env.serving.node_reserved_gib,
            # Every HyperPod node runs the CSI node pod and its FUSE clients.
            curvine_gib=res.fuse.memory_gib
            + res.csi_node.memory_gib
            + 2 * res.sidecar.memory_gib
            # Worker groups also run a Curvine worker and may run a master (masters are placed on worker groups).
            + (res.worker.memory_gib + res.master.memory_gib if group.name in worker_groups else 0),
            pods_gib=math.ceil(gpus_per_node * memory_per_gpu),
            gpus=shape.gpus,
            gpus_used=gpus_per_node,
        )
        if gpus_demanded > shape.gpus * group.count:
            raise ValueError(
                f"hyperpod.instance_groups {group.name}: endpoints need {gpus_demanded} GPUs "
                f"({', '.join(f'{e.name}: {e.replicas} x {s.gpus_per_replica}' for e, s in on_group)}) but "
                f"{group.count} x {group.instance_type} have {shape.gpus * group.count}; add nodes (count) or lower replicas"
            )
        if budget.free_gib < 0:
            detail = ", ".join(
                f"{e.name}: {s.pod_memory_gib} GiB per pod of {s.gpus_per_replica} GPU(s) "
                f"(L1 {e.l1_gib} x {e.tensor_parallel_size} + vLLM {s.vllm_host_gib} + shm {e.shm_gib})"
                for e, s in on_group
            )
            raise ValueError(
                f"hyperpod.instance_groups {group.name}: pods do not fit the {budget.memory_gib} GiB of "
                f"{group.instance_type}: tiered storage {budget.tiered_storage_gib:.1f} GiB + reserved "
                f"{budget.reserved_gib} GiB + Curvine {budget.curvine_gib} GiB + endpoint pods {budget.pods_gib} GiB "
                f"on {gpus_per_node} GPU(s) ({detail}) = {budget.memory_gib - budget.free_gib:.1f} GiB; "
                "lower l1_gib or the tiered-storage share"
            )
        nodes.append(budget)
    workers = sum(g.count for g in env.curvine_worker_groups)
    capacity = int(workers * env.curvine.worker.capacity_gb * GB * env.curvine.eviction.high_watermark)
    return EnvironmentSizing(endpoints=sized, nodes=tuple(nodes), l2_capacity_bytes=capacity, curvine_workers=workers)
