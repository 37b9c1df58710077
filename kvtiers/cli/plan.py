"""``kvtiers plan``: per-endpoint cache capacity and node memory budget, read from the environment's sizing.

Every number comes from :mod:`kvtiers.config.sizing` (the same facts the charts use). A ``--hf-config`` override
does not recompute anything here: it sets the endpoint's ``model_sizes`` from the local ``config.json`` and lets
the schema validate and size the environment again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from kvtiers.cli.output import human_bytes, table
from kvtiers.config import ConfigError, Environment
from kvtiers.config.loader import format_validation_error
from kvtiers.models import ModelShape
from kvtiers.serving_defaults import GIB
from kvtiers.stacks.wiring.serving import l2_mount, l2_namespace


@dataclass(frozen=True)
class HfOverride:
    target: str
    """Endpoint name or model id."""
    path: Path


def parse_hf_override(value: str) -> HfOverride:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--hf-config {value!r}: expected NAME=PATH (NAME: an endpoint name or model id)")
    return HfOverride(name.strip(), Path(path.strip()))


def apply_hf_overrides(env: Environment, overrides: list[HfOverride], source: str) -> Environment:
    if not overrides:
        return env
    data = env.model_dump(mode="python")
    endpoints = data["serving"]["endpoints"]
    for override in overrides:
        matched = [(i, e) for i, e in enumerate(env.serving.endpoints) if override.target in (e.name, e.model)]
        if not matched:
            names = ", ".join(e.name for e in env.serving.endpoints) or "none"
            raise ConfigError(f"--hf-config {override.target}: no endpoint or model of that name (endpoints: {names})")
        for i, endpoint in matched:
            try:
                shape = ModelShape.from_hf_config(override.path, parameters=endpoint.shape.parameters)
            except FileNotFoundError:
                raise ConfigError(f"--hf-config {override.target}: no such file {override.path}") from None
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"--hf-config {override.target}: {override.path} is not a usable Hugging Face config.json "
                    f"(missing or bad {exc})"
                ) from None
            endpoints[i]["model_sizes"] = {
                "layers": shape.layers,
                "kv_heads": shape.kv_heads,
                "head_dim": shape.head_dim,
                "parameters": shape.parameters,
            }
    try:
        return Environment.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(f"{source} (with --hf-config)", exc)) from None


def plan_data(env: Environment) -> dict:
    sizing = env.sizing
    endpoints = []
    for endpoint, sized in zip(env.serving.endpoints, sizing.endpoints):
        namespace = l2_namespace(env, endpoint)
        endpoints.append(
            {
                "name": sized.name,
                "model": sized.model,
                "instance_group": endpoint.instance_group,
                "replicas": endpoint.replicas,
                "kv_bytes_per_token": sized.kv_bytes_per_token,
                "weight_bytes": sized.weight_bytes,
                "gpus_per_replica": sized.gpus_per_replica,
                "l0_tokens": sized.l0_tokens,
                "l1_bytes": sized.l1_bytes,
                "l1_tokens": sized.l1_tokens,
                "l2_tokens": sizing.l2_tokens(sized.name),
                "l2_enabled": sized.l2_enabled,
                "l2_reason": sized.l2_reason,
                "l2_namespace": l2_mount(env, endpoint).sub_path,
                "l2_revision": namespace.revision,
                "pod_memory_gib": sized.pod_memory_gib,
                "pods_per_node": sized.pods_per_node,
            }
        )
    nodes = [
        {
            "group": n.group,
            "instance_type": n.instance_type,
            "memory_gib": n.memory_gib,
            "tiered_storage_gib": n.tiered_storage_gib,
            "reserved_gib": n.reserved_gib,
            "curvine_gib": n.curvine_gib,
            "pods_gib": n.pods_gib,
            "free_gib": n.free_gib,
            "gpus": n.gpus,
            "gpus_used": n.gpus_used,
        }
        for n in sizing.nodes
    ]
    return {
        "environment": env.name,
        "l2_capacity_bytes": sizing.l2_capacity_bytes,
        "curvine_workers": sizing.curvine_workers,
        "endpoints": endpoints,
        "nodes": nodes,
    }


def render(data: dict):
    """The tables ``plan`` prints: one column per endpoint / per instance group, so they fit narrow terminals."""
    eps = data["endpoints"]
    facts = [
        ("model", lambda e: e["model"]),
        ("instance group", lambda e: f"{e['instance_group']} ({e['replicas']} replica(s), {e['pods_per_node']}/node)"),
        ("KV bytes per token", lambda e: f"{e['kv_bytes_per_token']:,} B"),
        ("weights", lambda e: f"{e['weight_bytes'] / GIB:.1f} GiB on {e['gpus_per_replica']} GPU(s)"),
        ("L0 GPU prefix cache", lambda e: f"{e['l0_tokens']:,} tokens"),
        ("L1 host DRAM (LMCache)", lambda e: f"{e['l1_tokens']:,} tokens ({human_bytes(e['l1_bytes'])})"),
        ("L2 Curvine (shared)", lambda e: f"{e['l2_tokens']:,} tokens"),
        ("L2 decision", lambda e: ("on" if e["l2_enabled"] else "off") + f" - {e['l2_reason']}"),
        (
            "L2 namespace",
            lambda e: e["l2_namespace"] + (" (revision unpinned)" if e["l2_revision"] == "unpinned" else ""),
        ),
        ("pod memory", lambda e: f"{e['pod_memory_gib']} GiB"),
    ]
    cache = table(
        f"{data['environment']}: cache capacity per replica",
        ["", *(e["name"] for e in eps)],
        [[label, *(fn(e) for e in eps)] for label, fn in facts],
    )
    cache.caption = (
        f"L2: {data['curvine_workers']} Curvine worker(s), {data['l2_capacity_bytes'] / 1e12:.2f} TB usable "
        "(capacity x eviction high watermark)"
    )
    nodes = data["nodes"]
    node_facts = [
        ("instance type", lambda n: n["instance_type"]),
        ("node memory", lambda n: f"{n['memory_gib']} GiB"),
        ("tiered storage share", lambda n: f"{n['tiered_storage_gib']:.1f} GiB"),
        ("reserved (OS, kubelet)", lambda n: f"{n['reserved_gib']} GiB"),
        ("Curvine pods", lambda n: f"{n['curvine_gib']} GiB"),
        ("endpoint pods", lambda n: f"{n['pods_gib']} GiB"),
        ("free", lambda n: f"{n['free_gib']:.1f} GiB"),
        ("GPUs used", lambda n: f"{n['gpus_used']}/{n['gpus']}"),
    ]
    budget = table(
        "node memory budget (per node)",
        ["", *(n["group"] for n in nodes)],
        [[label, *(fn(n) for n in nodes)] for label, fn in node_facts],
    )
    return cache, budget
