"""The LMCache configuration of an endpoint: one YAML file, plus the two settings that must differ per pod.

The engine's LMCache (0.3.11's vLLM integration, ``lmcache_get_or_create_config``) reads ``LMCACHE_CONFIG_FILE``
and then lets ``LMCACHE_*`` variables override it (``update_config_from_env``), so two mechanisms could silently
fight. The file carries every setting shared by the endpoint's pods. The loader does no variable expansion in the
file (plain ``yaml.safe_load``), so the two per-pod values come from variables Kubernetes expands from the pod name:

- ``lmcache_instance_id`` (kvaware): the controller indexes the cache by instance, so it must be unique per pod;
- ``extra_config.fs_connector_relative_tmp_dir`` (L2 on): the fs connector writes ``<key>.tmp`` and renames it.
  By default that temporary name is the same on every pod, so two pods storing one chunk write one file at once,
  and one can truncate the other's file after its rename made it visible: a reader can then get the right length
  with zeroed bytes (wrong KV). A directory per pod keeps every temporary file private; the rename stays atomic.

The contract tests load exactly these three inputs with the engine's LMCache version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.kvtiers_engine_drain import INSTANCE_ID_ENV
from kvtiers.k8s_charts.l2 import POD_TMP_DIR_PREFIX
from kvtiers.k8s_charts.vllm import LMCache

EXTRA_CONFIG_ENV = "LMCACHE_EXTRA_CONFIG"
POD_NAME_ENV = "POD_NAME"


def lmcache_config(lmcache: LMCache, *, router_host: str, gpu_workers: int) -> dict[str, Any]:
    """The keys LMCache's ``LMCacheEngineConfig`` reads (checked against the engine's LMCache by the tests).

    :param router_host: where a kvaware engine reaches the controller (:func:`names.router_host`).
    :param gpu_workers: GPU workers per engine (tensor x pipeline parallel), each with its own LMCache worker port
        (kvaware).
    """
    config: dict[str, Any] = {
        "chunk_size": lmcache.chunk_size,
        "local_cpu": True,
        "max_local_cpu_size": float(lmcache.max_local_cpu_size_gib),
        # A trailing partial chunk can only be hit by an identical prompt: storing it costs L1/L2 space and writes.
        "save_unfull_chunk": False,
    }
    if lmcache.remote_url is not None:
        config["remote_url"] = lmcache.remote_url
        config["remote_serde"] = lmcache.remote_serde
        # The L2 guard bounds every L2 existence check and read by this (LMCache bounds only its reads).
        config["blocking_timeout_secs"] = lmcache.l2_timeout_seconds
    if lmcache.controller is not None:
        config["enable_controller"] = True
        config["controller_pull_url"] = f"{router_host}:{names.LMCACHE_CONTROLLER_PULL_PORT}"
        config["controller_reply_url"] = f"{router_host}:{names.LMCACHE_CONTROLLER_REPLY_PORT}"
        config["lmcache_worker_ports"] = list(names.lmcache_worker_ports(gpu_workers))
        config["lmcache_worker_heartbeat_time"] = lmcache.controller.heartbeat_seconds
        config["lmcache_worker_heartbeat_delay_time"] = lmcache.controller.heartbeat_delay_seconds
    return config


def render_lmcache_config(lmcache: LMCache, *, router_host: str, gpu_workers: int) -> str:
    config = lmcache_config(lmcache, router_host=router_host, gpu_workers=gpu_workers)
    text: str = yaml.safe_dump(config, sort_keys=True, default_flow_style=False)
    return text


def per_pod_env(lmcache: LMCache, pod_name: str = f"$({POD_NAME_ENV})") -> dict[str, str]:
    """The ``LMCACHE_*`` overrides each pod sets, with the pod name as Kubernetes substitutes it (``$(POD_NAME)``,
    declared before them). The tests pass a concrete name to load them as the engine does."""
    env: dict[str, str] = {}
    if lmcache.controller is not None:
        env[INSTANCE_ID_ENV] = pod_name
    if lmcache.remote_url is not None:
        env[EXTRA_CONFIG_ENV] = json.dumps({"fs_connector_relative_tmp_dir": f"{POD_TMP_DIR_PREFIX}{pod_name}"})
    return env


def config_checksum(*texts: str) -> str:
    """Pod-template annotation value: a change of the config (or of the L2 guard the pods load) rolls the engines."""
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()
