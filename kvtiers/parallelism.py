"""How an engine lays its model over a node's GPUs (tensor x pipeline parallelism), and when the layout is likely the
slower one on G6e.

G6e's NVIDIA L40S GPUs have no NVLink: tensor parallelism all-reduces the activations of every layer over PCIe, and
vLLM switches its own all-reduce off above two GPUs without NVLink, falling back to NCCL
(``vllm/distributed/device_communicators/custom_all_reduce.py`` @ v0.12.0). vLLM's guidance for such GPUs is pipeline
parallelism: "if the GPUs on the node do not have NVLINK interconnect (e.g. L40S), leverage pipeline parallelism
instead of tensor parallelism for higher throughput and lower communication overhead"
(``docs/serving/parallelism_scaling.md`` @ v0.12.0). A published measurement on 8 PCIe-only L4s (Llama-3.1-70B,
substratus.ai) served 17 % more requests per second with TP 2 x PP 4 than with TP 4 x PP 2. Pipeline stages do
not shorten one request's prefill, so the layout is about throughput under load; measure TTFT with ``kvtiers bench``.
"""

from __future__ import annotations

PCIE_TENSOR_PARALLEL_LIMIT = 2
"""The largest tensor-parallel size at which vLLM 0.12.0 keeps its custom all-reduce on GPUs without NVLink."""


def layout_advice(*, tensor_parallel_size: int, pipeline_parallel_size: int, nvlink: bool) -> str | None:
    """Why the layout is likely the slower one, with the layout to try instead; None when it is not."""
    if nvlink or tensor_parallel_size <= PCIE_TENSOR_PARALLEL_LIMIT:
        return None
    gpus = tensor_parallel_size * pipeline_parallel_size
    suggested = PCIE_TENSOR_PARALLEL_LIMIT
    instead = (
        f"try tensor_parallel_size {suggested} x pipeline_parallel_size {gpus // suggested} (the same {gpus} GPUs)"
        if gpus % suggested == 0
        else f"try a tensor_parallel_size of at most {suggested} with more pipeline stages"
    )
    return (
        f"tensor_parallel_size {tensor_parallel_size} all-reduces every layer over PCIe (no NVLink on these GPUs; "
        f"vLLM 0.12.0 turns its own all-reduce off above {PCIE_TENSOR_PARALLEL_LIMIT} GPUs without NVLink); vLLM "
        f"recommends pipeline parallelism on such GPUs: for throughput under load {instead}, and compare TTFT with "
        "kvtiers bench"
    )
