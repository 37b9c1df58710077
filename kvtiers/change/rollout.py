"""What a deploy does to the running pods and caches: which workloads restart and at what pace, the GPUs that stand
idle meanwhile, and per endpoint which cache tiers go cold.

A workload's pods restart when its pod template changes (Deployment, StatefulSet, DaemonSet; an
``InferenceEndpointConfig``'s spec other than ``replicas``, which its operator rolls out). The pace is the
workload's own update strategy (Kubernetes defaults: a Deployment 25 % surge and 25 % unavailable, a StatefulSet and
a DaemonSet one pod at a time); a PodDisruptionBudget does not pace a rollout, only evictions (node drains), and is
reported for those. The L0 (GPU) and L1 (host DRAM) caches live in an engine pod and are lost with it; the L2 is lost
for the whole endpoint when its namespace moves (:mod:`kvtiers.change.record`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtiers.change.manifests import ObjectRef
from kvtiers.change.record import Record

ENDPOINT_LABEL = "kvtiers.io/endpoint"
COMPONENT_LABEL = "app.kubernetes.io/component"
ENGINE_COMPONENT = "engine"
OPERATOR_KIND = ("inference.sagemaker.aws.amazon.com", "InferenceEndpointConfig")
GPU_RESOURCE = "nvidia.com/gpu"
WORKLOAD_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), OPERATOR_KIND})


@dataclass(frozen=True)
class Workload:
    """One workload after the deploy (or before, when it is deleted).

    :param change: ``restart`` (pod template changed), ``scale``, ``create``, ``delete`` or ``none``.
    :param at_once: pods the rollout takes down together (pods the strategy lets be unavailable).
    :param surge: extra pods the rollout starts beside the old ones (each needs its GPUs free).
    :param pace: the strategy in words.
    :param drain: what a PodDisruptionBudget allows during node drains (``None``: none covers the pods).
    """

    ref: ObjectRef
    endpoint: str | None
    engine: bool
    change: str
    replicas_before: int | None
    replicas_after: int | None
    gpus_per_pod: int
    at_once: int
    surge: int
    pace: str
    drain: str | None

    @property
    def gpus_idle(self) -> int:
        """GPUs that serve nothing at any moment of the rollout: the pods down at once, until their replacements
        load the model."""
        return self.at_once * self.gpus_per_pod if self.change == "restart" else 0


@dataclass(frozen=True)
class EndpointEffect:
    """The cache effects of a deploy on one endpoint.

    :param l0_l1_lost: engine pods whose GPU and DRAM caches are lost (restarted, removed or replaced).
    :param l2: the L2 effect in words (a new namespace and why; switched on or off), ``None``: unchanged.
    """

    name: str
    status: str
    """``added``, ``removed``, ``changed`` or ``unchanged``."""
    l0_l1_lost: int
    l2: str | None
    l2_reasons: tuple[str, ...]
    workloads: tuple[Workload, ...]


def _gpus(pod_spec: Mapping[str, Any]) -> int:
    total = 0
    for container in pod_spec.get("containers") or ():
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(GPU_RESOURCE, 0))
    return total


def _count(value: Any, replicas: int, *, up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = float(value[:-1]) * replicas / 100
        return math.ceil(exact) if up else math.floor(exact)
    return int(value)


def _pace(obj: Mapping[str, Any], replicas: int) -> tuple[int, int, str]:
    """(pods down at once, surge, words) of the object's update strategy."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind == "InferenceEndpointConfig":
        return replicas, 0, "operator-managed rollout (pace not declared: counted as all at once)"
    key = "strategy" if kind == "Deployment" else "updateStrategy"
    strategy = spec.get(key) or {}
    kind_default = "RollingUpdate"
    typ = strategy.get("type", kind_default)
    if typ == "Recreate":
        return replicas, 0, "Recreate: every pod at once"
    if typ == "OnDelete":
        return 0, 0, "OnDelete: pods change only when someone deletes them"
    rolling = strategy.get("rollingUpdate") or {}
    default_unavailable, default_surge = ("25%", "25%") if kind == "Deployment" else (1, 0)
    unavailable = _count(rolling.get("maxUnavailable", default_unavailable), replicas, up=False)
    surge = _count(rolling.get("maxSurge", default_surge), replicas, up=True)
    if unavailable == 0 and surge == 0:
        unavailable = 1
    words = f"RollingUpdate maxUnavailable {unavailable}, maxSurge {surge}"
    return min(unavailable, replicas), surge, words


def _template(obj: Mapping[str, Any]) -> Any:
    spec = obj.get("spec") or {}
    if obj["kind"] == "InferenceEndpointConfig":
        return {k: v for k, v in spec.items() if k != "replicas"}
    return spec.get("template")


def _replicas(obj: Mapping[str, Any] | None) -> int | None:
    if obj is None or obj["kind"] == "DaemonSet":
        return None
    return int((obj.get("spec") or {}).get("replicas", 1))


def _pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "InferenceEndpointConfig":
        return {"containers": [spec.get("worker") or {}]}
    return ((spec.get("template") or {}).get("spec")) or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    if obj["kind"] == "InferenceEndpointConfig":
        return {}
    return ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}


def _endpoint(obj: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The endpoint a workload serves, and whether its pods are engines (hold L0 and L1)."""
    if obj["kind"] == "InferenceEndpointConfig":
        return str((obj.get("spec") or {}).get("modelName")), True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    endpoint = labels.get(ENDPOINT_LABEL)
    return (None if endpoint is None else str(endpoint)), labels.get(COMPONENT_LABEL) == ENGINE_COMPONENT


def _drain(obj: Mapping[str, Any], budgets: list[Mapping[str, Any]]) -> str | None:
    labels = _labels(obj)
    namespace = (obj.get("metadata") or {}).get("namespace")
    for pdb in budgets:
        selector = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if (
            (pdb.get("metadata") or {}).get("namespace") == namespace
            and selector
            and selector.items() <= labels.items()
        ):
            spec = pdb["spec"]
            rule = {k: spec[k] for k in ("maxUnavailable", "minAvailable") if k in spec}
            return ", ".join(f"{k} {v}" for k, v in rule.items()) + f" (PodDisruptionBudget {pdb['metadata']['name']})"
    return None


def workloads(
    before: Mapping[ObjectRef, Mapping[str, Any]], after: Mapping[ObjectRef, Mapping[str, Any]]
) -> tuple[Workload, ...]:
    """Every workload the deploy creates, deletes, restarts or scales (``before``/``after``: the declared objects)."""
    budgets = [o for r, o in after.items() if (r.group, r.kind) == ("policy", "PodDisruptionBudget")]
    found = []
    for ref in sorted(set(before) | set(after)):
        if (ref.group, ref.kind) not in WORKLOAD_KINDS:
            continue
        old, new = before.get(ref), after.get(ref)
        current = new if new is not None else old
        assert current is not None
        replicas_before, replicas_after = _replicas(old), _replicas(new)
        if old is None:
            change = "create"
        elif new is None:
            change = "delete"
        elif _template(old) != _template(new):
            change = "restart"
        elif replicas_before != replicas_after:
            change = "scale"
        else:
            continue
        endpoint, engine = _endpoint(current)
        pods = replicas_before if replicas_before is not None else 1
        at_once, surge, pace = _pace(current, pods)
        found.append(
            Workload(
                ref=ref,
                endpoint=endpoint,
                engine=engine,
                change=change,
                replicas_before=replicas_before,
                replicas_after=replicas_after,
                gpus_per_pod=_gpus(_pod_spec(current)),
                at_once=at_once if change == "restart" else 0,
                surge=surge if change == "restart" else 0,
                pace=pace,
                drain=_drain(current, budgets),
            )
        )
    return tuple(found)


def _lost_pods(workload: Workload) -> int:
    """Engine pods whose L0 and L1 go: every old pod of a restart or delete, the removed pods of a scale-in."""
    if not workload.engine or workload.replicas_before is None:
        return 0
    if workload.change in ("restart", "delete"):
        return workload.replicas_before
    if workload.change == "scale" and workload.replicas_after is not None:
        return max(workload.replicas_before - workload.replicas_after, 0)
    return 0


def endpoint_effects(
    rolled: tuple[Workload, ...], before: Record | None, after: Record | None
) -> tuple[EndpointEffect, ...]:
    """The cache effects per endpoint of both records (endpoints without a record: from their workloads)."""
    old = before.endpoints if before else {}
    new = after.endpoints if after else {}
    names = sorted(set(old) | set(new) | {w.endpoint for w in rolled if w.endpoint})
    effects = []
    for name in names:
        mine = tuple(w for w in rolled if w.endpoint == name)
        l2: str | None = None
        reasons: tuple[str, ...] = ()
        o, n = old.get(name), new.get(name)
        if o is not None and n is not None:
            if n.l2 and not o.l2:
                l2 = f"L2 switched on: {n.l2_directory} (empty)"
            elif o.l2 and not n.l2:
                l2 = "L2 switched off"
            elif n.l2 and n.l2_moved(o):
                l2 = f"new L2 namespace {n.l2_location or n.l2_directory} (cold for the whole endpoint)"
                reasons = n.l2_reasons(o)
        if o is None and n is not None and before is not None:
            status = "added"
        elif n is None and o is not None and after is not None:
            status = "removed"
        else:
            status = "changed" if mine or l2 else "unchanged"
        effects.append(
            EndpointEffect(
                name=name,
                status=status,
                l0_l1_lost=sum(_lost_pods(w) for w in mine),
                l2=l2,
                l2_reasons=reasons,
                workloads=mine,
            )
        )
    return tuple(effects)
