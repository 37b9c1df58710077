"""What both serving paths run (the self-managed Deployment and the operator's ``InferenceEndpointConfig``): vLLM
with LMCache. The vLLM command line, the model weights and the LMCache settings are defined here once, so that the
two paths cannot render them differently."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from kvtiers.checks import in_range, one_of
from kvtiers.k8s_charts import kvtiers_l2_guard

Routing = Literal["prefixaware", "kvaware", "session", "roundrobin"]
"""The production-stack router's ``--routing-logic`` (and the operator's ``routingStrategy``)."""
ROUTINGS: tuple[str, ...] = get_args(Routing)
Dtype = Literal["bfloat16", "float16"]
DTYPES: tuple[str, ...] = get_args(Dtype)
Serde = Literal["naive"]
"""LMCache's ``remote_serde``: ``naive`` stores the KV tensors as they are (the only serde the L2 contract tests)."""
SERDES: tuple[str, ...] = get_args(Serde)

LMCACHE_CHUNK_TOKENS = 256
"""LMCache chunk size; prompts shorter than one chunk are never stored in L1/L2."""
LMCACHE_SERDE: Serde = "naive"
LMCACHE_HEARTBEAT_SECONDS = 10
"""kvaware: ``lmcache_worker_heartbeat_time``. Unset (LMCache's default), a worker never sends a heartbeat and the
router's controller deregisters it, with its whole cache index, ``--lmcache-worker-timeout`` after it registers."""
LMCACHE_HEARTBEAT_DELAY_SECONDS = 10
"""kvaware: ``lmcache_worker_heartbeat_delay_time`` (LMCache's default, set explicitly because the timeout below
depends on it): the first heartbeat follows registration after this delay."""
LMCACHE_MISSED_HEARTBEATS = 3
"""kvaware: heartbeats a worker may miss (a GC pause, a busy engine) before the controller drops it."""

LMCACHE_L2_TIMEOUT_SECONDS = 2
"""LMCache's ``blocking_timeout_secs``, which the L2 guard applies to every existence check and read of the L2: the
longest an engine's forward step waits for a hung L2 mount, once per ``kvtiers_l2_guard.BREAKER_SECONDS`` (the guard
then treats the L2 as absent). A chunk file holds 10 to 16 MiB for the models in the sizing table, which even at
100 MB/s reads in under 0.2 s; a read that takes seconds costs more than recomputing it (the source design
prefilled 2,500 tokens cold in 774 ms)."""
L2_GUARD_MODULE = Path(kvtiers_l2_guard.__file__).stem
"""The module vLLM imports as its KV connector when the engines have an L2 (``kv_connector_module_path``); the
serving charts ship its file in a ConfigMap on the engines' ``PYTHONPATH``."""


KV_TRANSFER_CONFIG_OPTION = "--kv-transfer-config"
"""vLLM's option naming the KV connector (``vllm/engine/arg_utils.py`` @ v0.12.0)."""


def kv_transfer_config(*, l2: bool) -> str:
    """vLLM's ``--kv-transfer-config``: LMCache stores and loads every request's KV; with an L2, through the kvtiers
    L2 guard (``kvtiers_l2_guard``: an unreadable chunk costs a recompute, never a wrong answer)."""
    connector = (
        {"kv_connector": kvtiers_l2_guard.CONNECTOR_CLASS, "kv_connector_module_path": L2_GUARD_MODULE}
        if l2
        else {"kv_connector": "LMCacheConnectorV1"}
    )
    config = {**connector, "kv_role": "kv_both"}
    return json.dumps(config, separators=(",", ":"))


@cache
def l2_guard_source() -> str:
    """The L2 guard's file, as the ConfigMaps ship it."""
    return Path(kvtiers_l2_guard.__file__).read_text()


S3_BUCKET_NAME = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
S3_REVISION = r"[A-Za-z0-9._\-]{1,64}"
HUB_COMMIT = r"[0-9a-f]{40}"


@dataclass(frozen=True, kw_only=True)
class S3Weights:
    """Model weights under an S3 prefix, copied into the pod before vLLM starts."""

    bucket: str
    prefix: str
    """Key prefix holding the weights, without leading or trailing slash."""
    revision: str | None = None
    """Version of the weights under the prefix (for example the commit they were copied from); part of the L2
    namespace, so replacing the weights in place must change it. @default None (unpinned)"""

    def __post_init__(self) -> None:
        if not self.bucket or not self.prefix or self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise ValueError(
                f"S3Weights: bucket {self.bucket!r} and prefix {self.prefix!r} must be non-empty, the prefix without "
                "a leading or trailing slash"
            )
        if not re.fullmatch(S3_BUCKET_NAME, self.bucket):
            raise ValueError(
                f"S3Weights: bucket {self.bucket!r} is not an S3 bucket name (3 to 63 lower-case letters, digits, "
                "'.' and '-', beginning and ending with a letter or digit)"
            )
        if self.revision is not None and not re.fullmatch(S3_REVISION, self.revision):
            raise ValueError(
                f"S3Weights: revision {self.revision!r} is not 1 to 64 letters, digits, '.', '_' or '-' (it names "
                "the L2 directory)"
            )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True, kw_only=True)
class HuggingFaceWeights:
    """Model weights downloaded from the Hugging Face Hub by model id (a gated model's token comes from the chart's
    ``EndpointSecrets.hf_token_secret``)."""

    revision: str | None = None
    """Model commit to serve, a 40-character commit hash (a branch such as ``main`` moves, and the L2 namespace
    must name the weights' bytes). @default None (the main branch when the pod starts)"""

    def __post_init__(self) -> None:
        if self.revision is not None and not re.fullmatch(HUB_COMMIT, self.revision):
            raise ValueError(
                f"HuggingFaceWeights: revision {self.revision!r} is not a 40-character commit hash (a branch moves "
                "under the L2 namespace that names it)"
            )


Weights = S3Weights | HuggingFaceWeights


def weights_location(model: str, *, bucket: str | None = None, prefix: str | None = None) -> str:
    """Where the weights' bytes come from: ``s3://<bucket>/<prefix>``, else ``hf://<model id>``. Part of the L2
    namespace, so that new weights under another location never read KV the old ones computed, even unpinned."""
    return f"s3://{bucket}/{prefix}" if bucket is not None else f"hf://{model}"


@dataclass(frozen=True, kw_only=True)
class LMCacheController:
    """kvaware only: the engines report their cache to the LMCache controller embedded in the router."""

    heartbeat_seconds: int = LMCACHE_HEARTBEAT_SECONDS
    """Interval of the engines' heartbeats. @default ``LMCACHE_HEARTBEAT_SECONDS`` (10)"""
    heartbeat_delay_seconds: int = LMCACHE_HEARTBEAT_DELAY_SECONDS
    """Delay of the first heartbeat after registration. @default ``LMCACHE_HEARTBEAT_DELAY_SECONDS`` (10)"""

    def __post_init__(self) -> None:
        in_range("LMCacheController", "heartbeat_seconds", self.heartbeat_seconds, 1)
        in_range("LMCacheController", "heartbeat_delay_seconds", self.heartbeat_delay_seconds, 0)

    @property
    def worker_timeout_seconds(self) -> int:
        """The router's ``--lmcache-worker-timeout``: the first heartbeat's delay plus a few missed heartbeats, so a
        live engine is never dropped and a dead one leaves the index within a minute."""
        return self.heartbeat_delay_seconds + LMCACHE_MISSED_HEARTBEATS * self.heartbeat_seconds


@dataclass(frozen=True, kw_only=True)
class LMCache:
    """The LMCache settings of one endpoint's engines (both serving paths)."""

    max_local_cpu_size_gib: float
    """L1: pinned host DRAM per GPU worker process (LMCache's ``max_local_cpu_size``)."""
    chunk_size: int = LMCACHE_CHUNK_TOKENS
    """Tokens per stored chunk. @default ``LMCACHE_CHUNK_TOKENS`` (256)"""
    remote_url: str | None = None
    """The L2: LMCache's ``remote_url`` (``L2Volume.remote_url``). @default None (no L2)"""
    remote_serde: Serde = LMCACHE_SERDE
    """Serde of the L2's files. @default ``LMCACHE_SERDE`` (``naive``)"""
    controller: LMCacheController | None = None
    """kvaware: report the cache to the router's controller. @default None (only kvaware routing uses one)"""
    l2_timeout_seconds: int = LMCACHE_L2_TIMEOUT_SECONDS
    """Bound of every L2 existence check and read (LMCache's ``blocking_timeout_secs``, enforced by the L2 guard).
    @default ``LMCACHE_L2_TIMEOUT_SECONDS`` (2)"""

    def __post_init__(self) -> None:
        if not self.max_local_cpu_size_gib > 0:
            raise ValueError(f"LMCache: max_local_cpu_size_gib must be positive, got {self.max_local_cpu_size_gib}")
        in_range("LMCache", "chunk_size", self.chunk_size, 1)
        one_of("LMCache", "remote_serde", self.remote_serde, SERDES)
        if self.remote_url is not None and not self.remote_url:
            raise ValueError("LMCache: remote_url is empty; leave it None for no L2")
        in_range("LMCache", "l2_timeout_seconds", self.l2_timeout_seconds, 1)

    @property
    def kv_transfer_config(self) -> str:
        return kv_transfer_config(l2=self.remote_url is not None)


def vllm_args(
    *,
    model_path: str,
    lmcache: LMCache,
    served_model_name: str,
    tensor_parallel_size: int,
    max_model_len: int,
    gpu_memory_utilization: float,
    pipeline_parallel_size: int = 1,
    dtype: Dtype | None = None,
    port: int | None = None,
    revision: str | None = None,
    inline_kv_transfer_config: bool = False,
) -> list[str]:
    """``vllm serve`` arguments with LMCache as the KV connector and prefix caching on.

    :param model_path: what vLLM loads: a local directory or a Hugging Face model id.
    :param lmcache: the engines' LMCache settings (with an L2, vLLM loads LMCache through the L2 guard).
    :param served_model_name: the name clients and the router see.
    :param pipeline_parallel_size: ``--pipeline-parallel-size`` (vLLM's multiprocessing executor runs the stages on
        one node). @default 1 (not passed)
    :param dtype: ``--dtype``. @default None (vLLM's ``auto``: the model's own dtype)
    :param port: listen on all interfaces at this port. @default None (vLLM's default address and port 8000)
    :param revision: ``--revision`` of a Hugging Face model. @default None (the main branch)
    :param inline_kv_transfer_config: pass the KV connector as one ``--kv-transfer-config=<json>`` argument, the form
        the operator path's admission check compares (hyperpod_operator/engine_args.py). @default False (two arguments)
    """
    args = [model_path]
    if port is not None:
        args += ["--host", "0.0.0.0", "--port", str(port)]
    args += ["--served-model-name", served_model_name, "--tensor-parallel-size", str(tensor_parallel_size)]
    if pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(pipeline_parallel_size)]
    if dtype is not None:
        args += ["--dtype", dtype]
    args += [
        "--max-model-len",
        str(max_model_len),
        "--gpu-memory-utilization",
        str(gpu_memory_utilization),
        "--enable-prefix-caching",
        *(
            [f"{KV_TRANSFER_CONFIG_OPTION}={lmcache.kv_transfer_config}"]
            if inline_kv_transfer_config
            else [KV_TRANSFER_CONFIG_OPTION, lmcache.kv_transfer_config]
        ),
    ]
    if revision is not None:
        args += ["--revision", revision]
    return args
