"""The LMCache <-> Curvine L2 contract.

Both serving paths (self-managed Deployments and the operator's admission policy) read these objects, so the mount
path, LMCache's ``remote_url`` and the endpoint's L2 directory cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

from kvtiers.k8s_charts.vllm import LMCACHE_CHUNK_TOKENS, LMCACHE_SERDE

DEFAULT_MOUNT_PATH = "/mnt/curvine/l2cache"
"""Where serving pods mount the L2 claim by default."""
UNPINNED_REVISION = "unpinned"
"""Revision recorded for weights without a pinned revision: a model update in place keeps the namespace, so pin one."""
POD_TMP_DIR_PREFIX = "tmp-"
REMOTE_URL_PREFIX = "fs://localhost:0"
"""LMCache's URL parser requires a host and port; ``localhost:0`` is a placeholder its fs connector discards."""


@dataclass(frozen=True, kw_only=True)
class L2Namespace:
    """Everything that decides the bytes LMCache stores for a token sequence, and the L2 directory named after it.

    Why: LMCache's file name is ``fmt@model path@world size@rank@chunk hash@kv dtype``. It names neither the model
    revision nor the LMCache version or serde, so after a model update at the same path, or an LMCache upgrade,
    engines would read KV of another model or format: silently wrong answers. Each endpoint therefore writes below
    ``<owner>/<directory>``, a fingerprint of all of these; an upgrade starts a fresh directory and the janitor
    evicts the old one. Endpoints share a directory only when they join one share group (same fingerprint).
    """

    model: str
    weights: str
    """Where the weights come from (:func:`~kvtiers.k8s_charts.vllm.weights_location`)."""
    revision: str
    """The weights' revision, or ``UNPINNED_REVISION``."""
    dtype: str
    kv_dtype: str
    """vLLM's ``--kv-cache-dtype``; the project leaves it ``auto``, which is the model dtype."""
    tensor_parallel_size: int
    pipeline_parallel_size: int
    """With the tensor-parallel size, which layers and heads each rank's chunk holds: LMCache 0.3.11 keys a chunk by
    the world size and rank only, so two layouts of one GPU count (TP 4 x PP 2, TP 8) would read each other's chunks
    as their own (``lmcache/utils.py``, ``integration/vllm/vllm_v1_adapter.py`` @ v0.3.11)."""
    chunk_size: int
    lmcache_version: str
    serde: str
    hash_seed: str
    """``PYTHONHASHSEED``: chunk hashes are Python's ``hash`` seeded by it."""

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def directory(self) -> str:
        """``<model slug>-<fingerprint>``: readable in ``cv ls``, unique by the fingerprint."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.model.lower()).strip("-")[:40]
        return f"{slug}-{self.fingerprint}"


ENDPOINT_DIR_PREFIX = "endpoint-"
SHARED_DIR_PREFIX = "shared-"


def l2_owner(*, endpoint: str, share_group: str | None = None) -> str:
    """The top-level L2 directory of an endpoint: its own (``endpoint-<name>``), or the one of the share group it
    explicitly joined (``shared-<group>``). The prefixes keep an endpoint and a group of the same name apart."""
    return f"{SHARED_DIR_PREFIX}{share_group}" if share_group is not None else f"{ENDPOINT_DIR_PREFIX}{endpoint}"


@dataclass(frozen=True, kw_only=True)
class L2Mount:
    """One endpoint's view of the L2: the claim's sub-directory ``sub_path`` mounted at ``mount_path`` in its serving
    pods, so that an engine can neither read nor write another endpoint's chunks. The path in the pod mirrors the
    path in the claim (``mount_path`` = the volume's mount path + ``/`` + ``sub_path``), so the janitor, which mounts
    the claim's root, sees every endpoint's files at the same relative paths. The kubelet creates a missing
    ``subPath`` directory before the bind mount (``kubelet_pods.go`` ``makeMounts``, ``SafeMakeDir``)."""

    claim_name: str
    sub_path: str
    """Relative to the claim's root: ``<owner>/<namespace directory>`` (:func:`l2_owner`)."""
    mount_path: str

    def __post_init__(self) -> None:
        segments = self.sub_path.split("/")
        if self.sub_path.startswith("/") or any(s in ("", ".", "..") for s in segments):
            raise ValueError(f"L2Mount: sub_path {self.sub_path!r} must be a relative path without '.', '..' or '//'")
        if not self.mount_path.endswith(f"/{self.sub_path}"):
            raise ValueError(f"L2Mount: mount_path {self.mount_path!r} does not end with sub_path {self.sub_path!r}")

    @property
    def remote_url(self) -> str:
        """LMCache's ``remote_url``: the mount itself."""
        return f"{REMOTE_URL_PREFIX}{self.mount_path}/"


@dataclass(frozen=True, kw_only=True)
class L2Volume:
    """The Curvine L2 as a ReadWriteMany claim of the Curvine StorageClass in the serving namespace. Serving pods
    mount one sub-directory of it each (:meth:`mount`); only the janitor mounts its root."""

    claim_name: str
    mount_path: str
    """Below which serving pods mount their directory; LMCache's ``remote_url`` points below it."""

    def __post_init__(self) -> None:
        if not self.claim_name:
            raise ValueError("L2Volume: claim_name is empty")
        if not self.mount_path.startswith("/") or self.mount_path.rstrip("/") == "":
            raise ValueError(f"L2Volume: mount_path {self.mount_path!r} must be an absolute path below /")

    def mount(self, namespace: L2Namespace, *, owner: str) -> L2Mount:
        """The directory of ``namespace`` below ``owner`` (:func:`l2_owner`), as the endpoint's pods mount it."""
        sub_path = f"{owner}/{namespace.directory}"
        return L2Mount(
            claim_name=self.claim_name, sub_path=sub_path, mount_path=f"{self.mount_path.rstrip('/')}/{sub_path}"
        )


def l2_namespace(
    *,
    model: str,
    weights_location: str,
    revision: str | None,
    dtype: str,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    lmcache_version: str,
    hash_seed: str,
) -> L2Namespace:
    """The one place an endpoint's L2 namespace is computed (both serving paths, ``plan`` and ``verify``), with the
    chunk size and serde every kvtiers engine uses; vLLM's KV dtype is left ``auto``, the model dtype."""
    return L2Namespace(
        model=model,
        weights=weights_location,
        revision=revision or UNPINNED_REVISION,
        dtype=dtype,
        kv_dtype=dtype,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        chunk_size=LMCACHE_CHUNK_TOKENS,
        lmcache_version=lmcache_version,
        serde=LMCACHE_SERDE,
        hash_seed=hash_seed,
    )
