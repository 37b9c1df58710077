"""The LMCache <-> Curvine L2 contract, built once from the environment.

Both serving paths (self-managed Deployments and the operator's admission policy) read this object, so the mount
path, LMCache's ``remote_url``, the serde and ``PYTHONHASHSEED`` cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtiers.config.schema import Environment
from kvtiers.config.sizing import LMCACHE_CHUNK_TOKENS


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

    @property
    def remote_url(self) -> str:
        # LMCache's URL parser requires a host and port; ``localhost:0`` is a placeholder it discards.
        return f"fs://localhost:0{self.mount_path.rstrip('/')}/"

    @classmethod
    def from_environment(cls, env: Environment) -> L2Settings:
        return cls(
            claim_name=env.serving.l2_claim_name,
            namespace=env.serving.namespace,
            mount_path=env.serving.l2_mount_path,
            hash_seed=env.serving.hash_seed,
        )
