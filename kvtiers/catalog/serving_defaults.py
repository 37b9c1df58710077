"""Defaults of the serving library's engines and the sizing of one engine pod (``kvtiers.k8s_charts.serving``).

Free of CDK imports, so that the environment schema (and ``kvtiers plan``) read the same values without loading
cdk8s: each default below is the one home of that value, for the charts and for the environment file, and
:func:`engine_pod_sizing` is the one place a pod's memory and model disk are computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

GIB = 1024**3

NAMESPACE = "serving"
"""The namespace of the engines, routers and the L2 claim."""
REPLICAS = 2
"""Two engines, so that a rollout or a node's loss leaves one serving."""
ROUTER_REPLICAS = 2
"""Two routers, so that a router's rollout or its node's loss leaves one serving (kvaware: one)."""
TENSOR_PARALLEL_SIZE = 1
PIPELINE_PARALLEL_SIZE = 1
"""One pipeline stage: the whole model on the tensor-parallel GPUs (see :mod:`kvtiers.parallelism` for G6e)."""
DTYPE: Literal["bfloat16"] = "bfloat16"
MAX_MODEL_LEN = 16384
API: Literal["chat"] = "chat"
"""The OpenAI API an endpoint's clients call: chat completions, what most clients send (kvaware needs
``completions``)."""
GPU_MEMORY_UTILIZATION = 0.9
CPU = 8
"""CPU request = limit of an engine pod."""
L1_GIB = 40
"""LMCache L1 (``max_local_cpu_size``) per GPU worker, pinned host DRAM."""
SHM_GIB = 8
"""Memory-backed /dev/shm (NCCL needs more than the 64 MiB default once TP > 1)."""
VLLM_OVERHEAD_GIB = 16
"""Host memory vLLM itself needs (Python, CUDA context, weight staging)."""
STARTUP_TIMEOUT_SECONDS = 1800
"""Startup-probe budget: weight download plus load plus CUDA-graph capture."""
HASH_SEED = "0"
"""``PYTHONHASHSEED`` of every engine and router: chunk and prefix hashes depend on it, so every pod that shares an
L2 needs the same one."""
MODEL_SYNC_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.31.3"
"""Init container that copies S3 weights to the pod (``aws s3 sync``)."""

VLLM_HOST_GIB_PER_EXTRA_RANK = 4
"""Host memory of each tensor-parallel worker process beyond the first (its own Python, CUDA context and pinned
staging buffers): vLLM runs one process per GPU, so its host overhead grows with the tensor-parallel size."""
MODEL_DISK_HEADROOM = 1.1
"""Model emptyDir limit = weights x this + ``MODEL_DISK_EXTRA_GIB`` (tokenizer, configs, shard rounding)."""
MODEL_DISK_EXTRA_GIB = 2


@dataclass(frozen=True)
class EnginePodSizing:
    """What one engine pod needs on its node."""

    vllm_host_gib: int
    """vLLM's host memory: its overhead plus ``VLLM_HOST_GIB_PER_EXTRA_RANK`` per GPU beyond the first."""
    memory_gib: int
    """Memory request = limit: the LMCache L1 of every GPU worker, vLLM itself and the memory-backed /dev/shm."""
    model_disk_gib: int
    """Size limit of the pod's model directory (node ephemeral storage)."""


def engine_pod_sizing(
    *, weight_bytes: int, gpu_workers: int, l1_gib: int, shm_gib: int, vllm_overhead_gib: int
) -> EnginePodSizing:
    """An engine pod's memory and model disk from its model's weight size and its settings; ``gpu_workers`` is its
    GPUs (tensor x pipeline parallel size), one vLLM worker process and one LMCache L1 each."""
    vllm_host_gib = vllm_overhead_gib + VLLM_HOST_GIB_PER_EXTRA_RANK * (gpu_workers - 1)
    return EnginePodSizing(
        vllm_host_gib=vllm_host_gib,
        memory_gib=l1_gib * gpu_workers + vllm_host_gib + shm_gib,
        model_disk_gib=math.ceil(weight_bytes / GIB * MODEL_DISK_HEADROOM) + MODEL_DISK_EXTRA_GIB,
    )


ACTIVATION_RESERVE_GIB = 2
"""GPU memory per GPU that vLLM keeps for activations and CUDA graphs beyond the weights (an estimate)."""


def gpu_cache_tokens(
    *,
    model: str,
    weight_bytes: int,
    kv_bytes_per_token: int,
    gpus: int,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
) -> int:
    """Tokens of GPU prefix cache (L0) one pod holds after its weights, on ``gpus`` GPUs of ``gpu_memory_gib`` each at
    ``gpu_memory_utilization``; refused when the weights do not fit (vLLM would fail to load them)."""
    usable = gpus * (gpu_memory_gib * gpu_memory_utilization - ACTIVATION_RESERVE_GIB) * GIB
    if usable <= weight_bytes:
        raise ValueError(
            f"{model} weights need {weight_bytes / GIB:.1f} GiB but {gpus} GPU(s) at gpu_memory_utilization "
            f"{gpu_memory_utilization} give {usable / GIB:.1f} GiB; raise tensor_parallel_size or "
            "pipeline_parallel_size"
        )
    return int((usable - weight_bytes) // kv_bytes_per_token)


# The bounds of an engine's and a router's settings, checked where they are built (Engine, Router).
MAX_REPLICAS = 64
"""Engine replicas per endpoint: more is a fleet of its own, not one endpoint."""
MAX_PARALLEL_SIZE = 8
"""Tensor and pipeline parallel size each: a G6e node has at most 8 GPUs."""
GPU_MEMORY_UTILIZATION_RANGE = (0.1, 0.95)
"""Above 0.1 (below, no room for the weights) and at most 0.95 (the CUDA context and vLLM's own buffers need the
rest)."""
MIN_MAX_MODEL_LEN = 256
"""At least one LMCache chunk (256 tokens)."""
MIN_VLLM_OVERHEAD_GIB = 4
"""Below 4 GiB vLLM's own process (Python, CUDA context, weight staging) does not start."""
MIN_STARTUP_TIMEOUT_SECONDS = 60
"""Weight download, load and CUDA-graph capture never take less."""
MAX_ROUTER_REPLICAS = 10
