"""What a deploy does to the running pods and caches: which workloads restart and at what pace, the GPUs that stand
idle meanwhile, and per endpoint which cache tiers go cold.

A workload's pods restart when its pod template changes (Deployment, StatefulSet, DaemonSet; an
``InferenceEndpointConfig``'s spec other than ``replicas``, which its operator rolls out). The pace is the
workload's own update strategy (Kubernetes defaults: a Deployment 25 % surge and 25 % unavailable, a StatefulSet and
a DaemonSet one pod at a time); a PodDisruptionBudget does not pace a rollout, only evictions (node drains), and is
reported for those; an ``OnDelete`` workload changes no pod until someone deletes one. The L0 (GPU) and L1 (host
DRAM) caches live in an engine pod and are lost with it; the L2 is lost for the whole endpoint when its namespace
moves (:mod:`kvtiers.change.record`), and is empty for a new or renamed endpoint. An L2 directory no endpoint reads
any more is abandoned on Curvine until the janitor evicts it or someone deletes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtiers.change.manifests import ObjectRef
from kvtiers.change.record import EndpointRecord, Record
from kvtiers.k8s_charts.names import CURVINE_JANITOR, JANITOR_L2_MOUNT

ENDPOINT_LABEL = "kvtiers.io/endpoint"
COMPONENT_LABEL = "app.kubernetes.io/component"
ENGINE_COMPONENT = "engine"
OPERATOR_KIND = ("inference.sagemaker.aws.amazon.com", "InferenceEndpointConfig")
GPU_RESOURCE = "nvidia.com/gpu"
ROUTER_COMPONENT = "router"
CURVINE_MASTER_COMPONENT = "master"
ROUTING_FLAG = "--routing-logic"
ROUTER_STATE = {
    "prefixaware": "the prefix trie (which engine served which prompt prefix)",
    "kvaware": "the kvaware index (the LMCache controller's map of which engine holds which KV chunks)",
}
"""The routing state a production-stack router builds from traffic in its own process, per routing logic
(vllm-stack-0.1.12 ``routers/routing_logic.py``; LMCache 0.3.11 ``cache_controller``): a new router pod starts with
none, so requests lose their cache affinity until traffic rebuilds it."""
WORKLOAD_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), OPERATOR_KIND})


@dataclass(frozen=True)
class Workload:
    """One workload after the deploy (or before, when it is deleted).

    :param change: ``restart`` (pod template changed), ``on-delete`` (pod template changed under an ``OnDelete``
        strategy: nothing restarts until someone deletes a pod), ``scale``, ``create`` or ``delete``.
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
    """GPUs of one pod that stops (the old pod; the new one for a workload that is only created)."""
    at_once: int
    surge: int
    pace: str
    drain: str | None
    gpus_per_new_pod: int = 0
    notes: tuple[str, ...] = ()
    """What the restart costs beyond the pods: an outage, a cache or routing state lost."""

    @property
    def gpus_idle(self) -> int:
        """GPUs that serve nothing at any moment of the rollout: the pods down at once, until their replacements
        load the model."""
        return self.at_once * self.gpus_per_pod if self.change == "restart" else 0

    @property
    def surge_gpus(self) -> int:
        """GPUs the extra pods of the rollout take beside the old ones."""
        return self.surge * self.gpus_per_new_pod


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
    abandoned: str | None = None
    """The L2 location (``<claim>/<owner>/<directory>``) this endpoint read before and no endpoint reads after: its
    files stay on Curvine."""

    @property
    def cold_l2(self) -> bool:
        """Whether the endpoint starts the deploy's end with an empty L2 (a new namespace, a new endpoint, L2 on)."""
        return (self.l2 or "").startswith(COLD_L2_EFFECTS)

    @property
    def reclaim(self) -> str | None:
        """How the abandoned directory's space comes back."""
        if self.abandoned is None:
            return None
        below_claim = self.abandoned.split("/", 1)[1] if "/" in self.abandoned else self.abandoned
        return (
            f"L2 directory {self.abandoned} of {self.name} is abandoned on Curvine (no endpoint reads it after the "
            f"deploy): the {CURVINE_JANITOR} evicts its files first once the L2 passes its high watermark (they are "
            f"never read again, so they are the least recently used); to free it now: kubectl -n <serving namespace> "
            f"exec deploy/{CURVINE_JANITOR} -- rm -r {JANITOR_L2_MOUNT}/{below_claim}"
        )


def pod_gpus(obj: Mapping[str, Any]) -> int:
    """GPUs one pod of a workload (or of an ``InferenceEndpointConfig``) asks."""
    return _gpus(_pod_spec(obj))


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


def _change(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str | None:
    if old is None:
        return "create"
    if new is None:
        return "delete"
    if _template(old) != _template(new):
        strategy = (new.get("spec") or {}).get("updateStrategy") or {}
        return "on-delete" if strategy.get("type") == "OnDelete" else "restart"
    if _replicas(old) != _replicas(new):
        return "scale"
    return None


def _routing_logic(obj: Mapping[str, Any]) -> str | None:
    for container in _pod_spec(obj).get("containers") or ():
        args = [str(a) for a in container.get("args") or ()]
        if ROUTING_FLAG in args[:-1]:
            return args[args.index(ROUTING_FLAG) + 1]
    return None


def _notes(
    obj: Mapping[str, Any], change: str, endpoint: str | None, engine: bool, at_once: int, replicas: int | None
) -> tuple[str, ...]:
    """What a restart (or deletion) costs beyond its pods."""
    if change not in ("restart", "delete"):
        return ()
    labels = (obj.get("metadata") or {}).get("labels") or {}
    component = labels.get(COMPONENT_LABEL)
    notes = []
    if engine and change == "restart" and replicas is not None and at_once >= replicas:
        notes.append(
            f"{endpoint}: all {replicas} engine pod(s) stop at once (a single replica makes every rollout an outage): "
            "no engine serves until the new pod has loaded the model"
        )
    if component == ROUTER_COMPONENT and change == "restart":
        logic = _routing_logic(obj)
        if logic in ROUTER_STATE:
            notes.append(f"{endpoint} router ({logic}): {ROUTER_STATE[logic]} is lost with each router pod")
    if obj["kind"] == "StatefulSet" and component == CURVINE_MASTER_COMPONENT and change == "restart" and replicas == 1:
        notes.append(
            "the single Curvine master restarts: an L2 outage for every endpoint (L2 reads and writes fail and the "
            'engines recompute) until it is back (docs/runbooks.md "Curvine master restart")'
        )
    return tuple(notes)


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
        change = _change(old, new)
        if change is None:
            continue
        current = new if new is not None else old
        stopping = old if old is not None else new
        assert current is not None and stopping is not None
        replicas_before, replicas_after = _replicas(old), _replicas(new)
        endpoint, engine = _endpoint(current)
        pods = replicas_before if replicas_before is not None else 1
        at_once, surge, pace = _pace(current, pods)
        at_once = at_once if change == "restart" else 0
        found.append(
            Workload(
                ref=ref,
                endpoint=endpoint,
                engine=engine,
                change=change,
                replicas_before=replicas_before,
                replicas_after=replicas_after,
                gpus_per_pod=pod_gpus(stopping),
                gpus_per_new_pod=pod_gpus(current),
                at_once=at_once,
                surge=surge if change == "restart" else 0,
                pace=pace,
                drain=_drain(current, budgets),
                notes=_notes(current, change, endpoint, engine, at_once, replicas_before),
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


def _l2_change(
    o: EndpointRecord | None, n: EndpointRecord | None, added: bool, renamed_from: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """The L2 effect in words and why."""
    if n is not None and n.l2 and added:
        reasons = (f"renamed from {renamed_from} (the same L2 namespace, under another owner directory)",)
        return f"new, empty L2: {n.l2_location or n.l2_directory}", reasons if renamed_from else ()
    if o is None or n is None:
        return None, ()
    if n.l2 and not o.l2:
        return f"L2 switched on: {n.l2_directory} (empty)", ()
    if o.l2 and not n.l2:
        return "L2 switched off", ()
    if n.l2 and n.l2_moved(o):
        return f"new L2 namespace {n.l2_location or n.l2_directory} (cold for the whole endpoint)", n.l2_reasons(o)
    return None, ()


COLD_L2_EFFECTS = ("new L2 namespace", "new, empty L2", "L2 switched on")
ABANDONED = "old L2 directory abandoned (see Effects)"


def _location(record: EndpointRecord) -> str:
    return record.l2_location or record.l2_directory


def renames(old: Mapping[str, EndpointRecord], new: Mapping[str, EndpointRecord]) -> dict[str, str]:
    """New endpoint name -> the removed endpoint it replaces: the same serving path and L2 namespace fields."""
    removed = [name for name in old if name not in new]
    found: dict[str, str] = {}
    for name in (n for n in new if n not in old):
        match = next(
            (
                r
                for r in removed
                if r not in found.values()
                and old[r].serving == new[name].serving
                and old[r].l2_namespace == new[name].l2_namespace
            ),
            None,
        )
        if match is not None:
            found[name] = match
    return found


def endpoint_effects(
    rolled: tuple[Workload, ...], before: Record | None, after: Record | None
) -> tuple[EndpointEffect, ...]:
    """The cache effects per endpoint of both records (endpoints without a record: from their workloads)."""
    old = before.endpoints if before else {}
    new = after.endpoints if after else {}
    names = sorted(set(old) | set(new) | {w.endpoint for w in rolled if w.endpoint})
    renamed = renames(old, new) if before is not None else {}
    still_read = {_location(r) for r in new.values() if r.l2}
    effects = []
    for name in names:
        mine = tuple(w for w in rolled if w.endpoint == name)
        o, n = old.get(name), new.get(name)
        added = o is None and n is not None and before is not None
        l2, reasons = _l2_change(o, n, added, renamed.get(name))
        if added:
            status = "added"
        elif n is None and o is not None and after is not None:
            status = "removed"
        else:
            status = "changed" if mine or l2 else "unchanged"
        abandoned = (
            _location(o) if o is not None and o.l2 and after is not None and _location(o) not in still_read else None
        )
        if status == "removed" and abandoned:
            l2 = ABANDONED
        effects.append(
            EndpointEffect(
                name=name,
                status=status,
                l0_l1_lost=sum(_lost_pods(w) for w in mine),
                l2=l2,
                l2_reasons=reasons,
                workloads=mine,
                abandoned=abandoned,
            )
        )
    return tuple(effects)
