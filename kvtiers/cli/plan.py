"""``kvtiers plan``: per-endpoint cache capacity, and what lands on each HyperPod node against what it offers.

The cache numbers come from :mod:`kvtiers.model.sizing(config)` (the same facts the charts use). The node numbers come from
the HyperPod cluster's placement (:mod:`kvtiers.placement`): ``plan`` builds the environment's constructs in memory,
without synthesizing, and reads the placement they registered, so it shows exactly what synth checks. A
``--hf-config`` override does not recompute anything here: it sets the endpoint's ``model_sizes`` from the local
``config.json`` and lets the schema validate and size the environment again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvtiers.catalog.instance_types import G6E_INSTANCE_TYPES
from kvtiers.catalog.models import ModelShape
from kvtiers.catalog.serving_defaults import GIB
from kvtiers.cli.output import human_bytes, table
from kvtiers.config import ConfigError, Environment, model
from kvtiers.config.cost import HYPERPOD_INSTANCE
from kvtiers.config.loader import format_validation_error
from kvtiers.config.model import l2_mount, l2_namespace
from kvtiers.parallelism import layout_advice
from kvtiers.placement import NodePlacement


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
            if endpoint.shape is None:
                raise ConfigError(
                    f"--hf-config {override.target}: {endpoint.model!r} has no sizes to take the parameter count "
                    "from; give model_sizes in the environment file"
                )
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


def placement_of(env: Environment) -> NodePlacement:
    """The environment's HyperPod placement, as its constructs register it (built in memory, nothing synthesized).
    Raises ``ValueError`` when a construct refuses its props."""
    import aws_cdk as cdk

    from kvtiers.stacks.deploy_graph import build_deploy_graph

    graph = build_deploy_graph(cdk.App(), env, review=True, nag=False)
    assert graph.placement is not None, "a full deploy graph has a HyperPod cluster"
    return graph.placement


def group_data(placement: NodePlacement) -> list[dict[str, Any]]:
    """Per instance group: its fullest node for every resource against what a node offers, and the GPUs idle."""
    groups = []
    for offer in placement.offers:
        use = placement.use(offer.group)
        price = HYPERPOD_INSTANCE.get(offer.instance_type)
        groups.append(
            {
                "group": offer.group,
                "instance_type": offer.instance_type,
                "count": offer.count,
                "threads_per_core": offer.threads_per_core,
                "resources": {
                    f.resource.label: {
                        "asked": f.asked,
                        "offered": f.offered,
                        "left": f.left,
                        "text": f"{f.resource.format(f.asked)} of {f.resource.format(f.offered)}",
                        "left_text": f.resource.format(f.left),
                    }
                    for f in use.fullest
                },
                "reserved": {
                    reason: {"cpu_millis": amount.cpu_millis, "memory_mib": amount.memory_mib}
                    for reason, amount in offer.reserved.items()
                },
                "gpus_idle": use.gpus_idle,
                "gpus_total": offer.count * offer.capacity.gpus,
                "idle_usd_per_hour": (
                    round(use.gpus_idle / offer.capacity.gpus * price.usd, 2)
                    if price is not None and offer.capacity.gpus
                    else None
                ),
            }
        )
    return groups


def plan_data(env: Environment) -> dict:
    """Everything ``plan`` prints. Raises ``ValueError`` when a construct refuses the environment's props."""
    placement = placement_of(env)
    sizing = model.sizing(env)
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
                "tensor_parallel_size": endpoint.tensor_parallel_size,
                "pipeline_parallel_size": endpoint.pipeline_parallel_size,
                "layout_advice": layout_advice(
                    tensor_parallel_size=endpoint.tensor_parallel_size,
                    pipeline_parallel_size=endpoint.pipeline_parallel_size,
                    nvlink=G6E_INSTANCE_TYPES[env.hyperpod.group(endpoint.instance_group).instance_type].nvlink,
                ),
            }
        )
    return {
        "environment": env.name,
        "l2_capacity_bytes": sizing.l2_capacity_bytes,
        "curvine_workers": sizing.curvine_workers,
        "endpoints": endpoints,
        "groups": group_data(placement),
        "problems": placement.problems(),
        "warnings": placement.warnings(),
    }


def render(data: dict):
    """The tables ``plan`` prints: one column per endpoint / per instance group, so they fit narrow terminals."""
    eps = data["endpoints"]
    facts = [
        ("model", lambda e: e["model"]),
        ("instance group", lambda e: f"{e['instance_group']} ({e['replicas']} replica(s))"),
        ("KV bytes per token", lambda e: f"{e['kv_bytes_per_token']:,} B"),
        ("weights", lambda e: f"{e['weight_bytes'] / GIB:.1f} GiB on {e['gpus_per_replica']} GPU(s)"),
        (
            "layout",
            lambda e: (
                f"TP {e['tensor_parallel_size']} x PP {e['pipeline_parallel_size']}"
                + (" (see below)" if e["layout_advice"] else "")
            ),
        ),
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
    groups = data["groups"]
    labels = list(groups[0]["resources"]) if groups else []
    node_rows = [
        [
            "instance type",
            *(f"{g['count']} x {g['instance_type']} ({g['threads_per_core']} threads/core)" for g in groups),
        ],
        *(
            [label, *(f"{g['resources'][label]['text']} (left {g['resources'][label]['left_text']})" for g in groups)]
            for label in labels
        ),
        ["GPUs idle (group)", *(_idle(g) for g in groups)],
    ]
    nodes = table(
        "the fullest node of each HyperPod group: asked of allocatable",
        ["", *(g["group"] for g in groups)],
        node_rows,
    )
    nodes.caption = (
        "allocatable: the instance less the kernel's share, the kubelet's reserve and eviction threshold, the system "
        "reserve and tiered storage; pods: the EKS-optimized AMI's limit unless the group sets max_pods (HyperPod's "
        "is not public); the fullest node: every pod that must or may land on one node (docs/placement-contract.md)"
    )
    return cache, nodes


def _idle(group: dict) -> str:
    idle = f"{group['gpus_idle']} of {group['gpus_total']}"
    if group["gpus_idle"] and group["idle_usd_per_hour"] is not None:
        return f"{idle} (${group['idle_usd_per_hour']:,.2f}/h)"
    return idle
