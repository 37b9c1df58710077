"""Synth-time notes about the environment that are not errors, from facts the schema and sizing already derived."""

from __future__ import annotations

from kvtiers.config import model
from kvtiers.config.schema import Environment


def tiered_storage_report(env: Environment) -> tuple[str, ...]:
    """One line per node group when HyperPod's tiered-storage reservation is on but nothing reads it."""
    if not env.tiered_storage_unused:
        return ()
    percentage = env.hyperpod.tiered_storage.memory_percentage
    return tuple(
        f"hyperpod tiered storage reserves {percentage} % of memory ({g.shape.memory_gib * percentage / 100:.1f} GiB "
        f"of {g.shape.memory_gib} GiB on each {g.instance_type} of group {g.name}) but no endpoint uses it (only "
        "serving: operator with inference_operator.l2_backend: tieredstorage does); set "
        "hyperpod.tiered_storage.enabled: false to give it to the pods"
        for g in env.hyperpod.instance_groups
    )


def l2_revision_report(env: Environment) -> tuple[str, ...]:
    """One line per endpoint on the L2 whose weights have no pinned revision: its L2 namespace cannot change when
    the weights are replaced in place, so engines could read the previous model's KV."""
    return tuple(
        f"{e.name}: L2 on but source.revision is not pinned; pin it so that new weights start a new L2 namespace "
        "(otherwise engines may read KV written by the previous weights)"
        for e in env.serving.endpoints
        if model.sizing(env).endpoint(e.name).l2_enabled and not e.source.revision
    )
