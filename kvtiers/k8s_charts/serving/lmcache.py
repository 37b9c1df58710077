"""The LMCache configuration file of an endpoint: one YAML document, the only way the engines are tuned.

LMCache reads ``LMCACHE_CONFIG_FILE`` and then lets ``LMCACHE_*`` variables override it (0.3.7's vLLM integration
and 0.5.6 both do ``from_file`` then ``update_config_from_env``), so two mechanisms would silently fight. The file
carries every setting; the one exception is kvaware's ``lmcache_instance_id``, which must be unique per pod: the
loader does no variable expansion in the file (plain ``yaml.safe_load``), so that key alone comes from
``LMCACHE_LMCACHE_INSTANCE_ID`` set to the pod name.
"""

from __future__ import annotations

import hashlib

import yaml

from kvtiers.k8s_charts.serving.props import LMCacheProps

INSTANCE_ID_ENV = "LMCACHE_LMCACHE_INSTANCE_ID"


def lmcache_config(props: LMCacheProps) -> dict:
    """The keys LMCache's ``LMCacheEngineConfig`` reads (names checked against lmcache 0.3.7 and 0.5.6)."""
    config: dict = {
        "chunk_size": props.chunk_size,
        "local_cpu": True,
        "max_local_cpu_size": float(props.max_local_cpu_size_gib),
    }
    if props.remote_url is not None:
        config["remote_url"] = props.remote_url
        config["remote_serde"] = props.remote_serde
    if props.controller is not None:
        config["enable_controller"] = True
        config["controller_pull_url"] = props.controller.pull_url
        config["controller_reply_url"] = props.controller.reply_url
        config["lmcache_worker_ports"] = list(props.controller.worker_ports)
        config["p2p_init_ports"] = list(props.controller.p2p_init_ports)
    return config


def render_lmcache_config(props: LMCacheProps) -> str:
    return yaml.safe_dump(lmcache_config(props), sort_keys=True, default_flow_style=False)


def config_checksum(text: str) -> str:
    """Pod-template annotation value: a config change rolls the engines."""
    return hashlib.sha256(text.encode()).hexdigest()
