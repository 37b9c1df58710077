"""The LMCache <-> Curvine L2 contract, built once from the environment.

Both serving paths (self-managed Deployments and the operator's admission policy) read these objects, so the mount
path, LMCache's ``remote_url``, the serde, ``PYTHONHASHSEED`` and the endpoint's L2 namespace cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from kvtiers.config.sizing import LMCACHE_CHUNK_TOKENS

if TYPE_CHECKING:
    from kvtiers.config.schema import Endpoint, Environment

UNPINNED_REVISION = "unpinned"
"""Revision recorded for weights without a pinned revision: a model update in place keeps the namespace, so pin one."""
POD_TMP_DIR_PREFIX = "tmp-"


@dataclass(frozen=True)
class L2Namespace:
    """Everything that decides the bytes LMCache stores for a token sequence, and the L2 directory named after it.

    Why: LMCache's file name is ``fmt@model path@world size@rank@chunk hash@kv dtype``. It names neither the model
    revision nor the LMCache version or serde, so after a model update at the same path, or an LMCache upgrade,
    engines would read KV of another model or format: silently wrong answers. Each endpoint therefore writes below
    ``<mount>/<directory>``, a fingerprint of all of these; an upgrade starts a fresh directory and the old one ages
    out under Curvine's quota eviction. Endpoints with the same fingerprint share one directory.
    """

    model: str
    revision: str
    dtype: str
    kv_dtype: str
    """vLLM's ``--kv-cache-dtype``; the project leaves it ``auto``, which is the model dtype."""
    tensor_parallel_size: int
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

    @classmethod
    def for_endpoint(cls, env: Environment, endpoint: Endpoint) -> L2Namespace:
        """The one place an endpoint's namespace is computed (both serving paths and ``kvtiers plan`` call it)."""
        settings = L2Settings.from_environment(env)
        return cls(
            model=endpoint.model,
            revision=endpoint.source.revision or UNPINNED_REVISION,
            dtype=endpoint.dtype,
            kv_dtype=endpoint.dtype,
            tensor_parallel_size=endpoint.tensor_parallel_size,
            chunk_size=settings.chunk_size,
            lmcache_version=env.serving.images.engine.lmcache,
            serde=settings.serde,
            hash_seed=settings.hash_seed,
        )


@dataclass(frozen=True)
class L2Settings:
    claim_name: str
    """ReadWriteMany PersistentVolumeClaim of the Curvine StorageClass, in the serving namespace."""
    namespace: str
    mount_path: str
    """Where the claim is mounted in every serving pod."""
    hash_seed: str
    """``PYTHONHASHSEED`` for every engine and router sharing the L2 (vLLM's prefix hash depends on it)."""
    serde: str = "naive"
    chunk_size: int = LMCACHE_CHUNK_TOKENS

    def directory(self, namespace: L2Namespace) -> str:
        return f"{self.mount_path.rstrip('/')}/{namespace.directory}"

    def remote_url(self, namespace: L2Namespace) -> str:
        # LMCache's URL parser requires a host and port; ``localhost:0`` is a placeholder it discards.
        return f"fs://localhost:0{self.directory(namespace)}/"

    @classmethod
    def from_environment(cls, env: Environment) -> L2Settings:
        return cls(
            claim_name=env.serving.l2_claim_name,
            namespace=env.serving.namespace,
            mount_path=env.serving.l2_mount_path,
            hash_seed=env.serving.hash_seed,
        )
