"""One environment's change, from two cloud assemblies: CloudFormation's resource changes, the Kubernetes objects
afterwards, immutable fields, restarts and cache effects; the errors that must block a merge; and the Markdown that
``kvtiers diff`` prints for a pull request."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvtiers.change.admission import RefusedResize, refused_resizes
from kvtiers.change.cloudformation import CfnAction, CfnChange, resource_changes
from kvtiers.change.deletions import Deletions, IntendedDeletion, deletions, read_intended_deletions
from kvtiers.change.dependency_chart import ChartChange, chart_change, read_chart_record
from kvtiers.change.deploy import DeployOutcome, deploy, orphan_reason
from kvtiers.change.groups import GroupChange, group_changes
from kvtiers.change.identity import association_conflicts
from kvtiers.change.manifests import ObjectRef, Templates, load_templates, manifest_resources
from kvtiers.change.operator import operator_replacements
from kvtiers.change.record import (
    RECORD_FILE,
    GroupRecord,
    Record,
    missing_records,
    not_computed,
    read_endpoint_record,
    read_placement_record,
)
from kvtiers.change.rollout import EndpointEffect, Workload, endpoint_effects, renames, workloads
from kvtiers.change.stacks import StackFinding, stack_findings
from kvtiers.change.system_nodes import NodegroupReplacement, node_summary, nodegroup_replacements, version_changes


@dataclass(frozen=True)
class EnvironmentChange:
    name: str
    resources: tuple[CfnChange, ...]
    outcome: DeployOutcome
    workloads: tuple[Workload, ...]
    endpoints: tuple[EndpointEffect, ...]
    identities: tuple[str, ...] = ()
    """Pod Identity associations that fail the deploy (:mod:`kvtiers.change.identity`)."""
    groups: tuple[GroupChange, ...] = ()
    """The HyperPod groups whose nodes or fullest node change (:mod:`kvtiers.change.groups`)."""
    deletions: Deletions = field(default_factory=Deletions)
    """Every object and resource the deploy deletes, and the change's acknowledgments
    (:mod:`kvtiers.change.deletions`)."""
    stack_order: tuple[StackFinding, ...] = ()
    """What the order of the stacks' deploys does: stale reads, deletions in use (:mod:`kvtiers.change.stacks`)."""
    refused: tuple[RefusedResize, ...] = ()
    """Claim growth the API server's resize admission refuses (:mod:`kvtiers.change.admission`)."""
    replacements: tuple[str, ...] = ()
    """Operator endpoints whose config is replaced: outage and new name (:mod:`kvtiers.change.operator`)."""
    system_nodes: tuple[NodegroupReplacement, ...] = ()
    """Managed node groups replaced, with the pods on them (:mod:`kvtiers.change.system_nodes`)."""
    versions: tuple[str, ...] = ()
    """What a Kubernetes version change does to the nodes (:func:`kvtiers.change.system_nodes.version_changes`)."""
    chart: ChartChange | None = None
    """A new pin of the HyperPod dependency chart, which a review synth leaves out of the templates
    (:mod:`kvtiers.change.dependency_chart`)."""
    missing_records: tuple[str, ...] = ()
    """The kvtiers records a side's assembly lacks (:func:`kvtiers.change.record.missing_records`)."""

    @property
    def errors(self) -> tuple[str, ...]:
        """What makes the deploy fail half way, or leaves the cluster or the data other than synth B says."""
        found = [
            f"{c.stack} {c.logical_id} ({c.type}): {c.error}"
            for c in self.resources
            if c.error and not self.deletions.covers(c)
        ]
        found += list(self.deletions.errors)
        found += list(self.identities)
        found += [f.message for f in self.stack_order if f.error]
        found += [
            f"orphan: {ref} stays on the cluster ({orphan_reason(ref, self.outcome)})" for ref in self.outcome.orphans
        ]
        found += [
            f"lost: {ref} is gone after the deploy (the cleanup delete of an old manifest, or its namespace was "
            "deleted or pruned and the apply into the terminating namespace failed)"
            for ref in self.outcome.lost
        ]
        found += [
            f"immutable: {change}: the apply fails and the stack rolls back; deploy a new environment with this "
            'change and move traffic to it (docs/runbooks.md "Upgrade")'
            for change in self.outcome.immutable
        ]
        found += [f"refused: {r}; deploy a new environment with the larger claim instead" for r in self.refused]
        return tuple(found)

    @property
    def warnings(self) -> tuple[str, ...]:
        found = [f.message for f in self.stack_order if not f.error]
        found += list(self.deletions.warnings)
        found += [
            f"{c.stack} is left deployed: {c.because[0]}" for c in self.resources if c.action is CfnAction.LEFT_DEPLOYED
        ]
        found += [
            f"cdk destroy {stack} (left deployed) deletes {ref}, which this change declares too (the old manifest's "
            "delete runs kubectl delete): deploy this change's stacks again after the destroy"
            for stack, ref in self.outcome.destroy_deletes
        ]
        found += [w for g in self.groups for w in g.warnings]
        found += [w for r in self.system_nodes for w in r.warnings]
        found += [
            f"may remain: {ref} (its deletion waits for a finalizer; the handler ignores kubectl delete errors)"
            for ref in self.outcome.may_remain
        ]
        found += [
            f"{c.logical_id} ({c.type}) may be replaced: {', '.join(c.because)}"
            for c in self.resources
            if c.action is CfnAction.MAY_REPLACE
        ]
        found += list(self.replacements)
        found += self.versions
        return tuple(found)

    def summary(self) -> str:
        counts = {a: sum(1 for c in self.resources if c.action is a) for a in CfnAction}
        restarts = sum(1 for w in self.workloads if w.change == "restart")
        cold = sum(1 for e in self.endpoints if e.cold_l2)
        lost = sum(e.l0_l1_lost for e in self.endpoints)
        verdict = f"**{len(self.errors)} error(s)**" if self.errors else "no errors"
        parts = [f"{n} {a.value}" for a, n in counts.items() if n]
        return (
            f"{self.name}: {verdict}; {', '.join(parts) or 'no resource changes'}; {restarts} workload(s) restart; "
            f"L0/L1 lost on {lost} engine pod(s); {cold} endpoint(s) with a cold L2"
            + (f"; {len(self.replacements)} operator endpoint(s) replaced (new name)" if self.replacements else "")
            + "".join(f"; {part}" for part in node_summary(self.groups, self.system_nodes))
            + (f"; {self.chart.summary}" if self.chart else "")
            + "".join(f"; {part}" for part in [not_computed(self.missing_records)] if part)
        )


def environment_change(
    name: str,
    before: Templates,
    after: Templates,
    before_record: Record | None,
    after_record: Record | None,
    groups: tuple[dict[str, GroupRecord] | None, dict[str, GroupRecord] | None] = (None, None),
    *,
    intended: tuple[IntendedDeletion, ...] = (),
    intended_before: tuple[IntendedDeletion, ...] = (),
) -> EnvironmentChange:
    outcome = deploy(before, after)
    old = {ObjectRef.of(o): o for r in manifest_resources(before).values() for o in r.objects}
    new = {ObjectRef.of(o): o for r in manifest_resources(after).values() for o in r.objects}
    rolled = workloads(old, new)
    resources = resource_changes(before, after)
    return EnvironmentChange(
        refused=refused_resizes(old, new),
        replacements=operator_replacements(
            rolled,
            old,
            new,
            groups,
            renames(before_record.endpoints, after_record.endpoints) if before_record and after_record else None,
        ),
        name=name,
        resources=resources,
        outcome=outcome,
        workloads=rolled,
        endpoints=endpoint_effects(rolled, before_record, after_record),
        identities=association_conflicts(before, after),
        groups=group_changes(
            *groups, l2_endpoints=[n for n, e in (before_record.endpoints if before_record else {}).items() if e.l2]
        ),
        system_nodes=nodegroup_replacements(resources, before),
        versions=version_changes(before, after),
        missing_records=missing_records((before_record, after_record), groups),
        deletions=deletions(outcome, resources, before, intended, intended_before),
        stack_order=stack_findings(before, after, outcome),
    )


def assembly_change(name: str, before_dir: Path, after_dir: Path) -> EnvironmentChange:
    """The change between two cloud assemblies (``cdk.out`` folders)."""
    change = environment_change(
        name,
        load_templates(before_dir),
        load_templates(after_dir),
        read_endpoint_record(before_dir),
        read_endpoint_record(after_dir),
        (read_placement_record(before_dir), read_placement_record(after_dir)),
        intended=read_intended_deletions(after_dir),
        intended_before=read_intended_deletions(before_dir),
    )
    return replace(change, chart=chart_change(read_chart_record(before_dir), read_chart_record(after_dir)))


CHANGE_WORDS = {"on-delete": "restarts on next pod deletion (OnDelete)"}


def _table(header: Iterable[str], rows: list[list[str]]) -> list[str]:
    head = list(header)
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows),
    ]


def _replicas(workload: Workload) -> str:
    def text(count: int | None) -> str:
        return "-" if count is None else str(count)

    return f"{text(workload.replicas_before)} -> {text(workload.replicas_after)}"


def _deleted(found: Deletions) -> list[str]:
    """The "Deleted" section: every object and resource the deploy deletes, what it loses, and whether the change
    says the loss is intended."""
    if not found.deleted:
        return []
    rows = [
        [d.target, d.how, d.loses or "-", "-" if not d.loses else d.intended or "**not acknowledged**"]
        for d in found.deleted
    ]
    return ["", "Deleted", "", *_table(["deleted", "by", "loses", "intended"], rows)]


DEPENDENCIES_NOT_COMPARED = "; dependencies NOT compared"


def markdown(
    changes: Iterable[EnvironmentChange], *, preface: Iterable[str] = (), dependencies_compared: bool = True
) -> str:
    """The pull-request comment: one summary line per environment first, then ``preface`` (what concerns every
    environment, such as the dependencies), then each environment's details. When the base was synthesized with this
    change's dependencies, the headline and every summary line say so."""
    changes = list(changes)
    total = sum(len(c.errors) for c in changes)
    flag = "" if dependencies_compared else DEPENDENCIES_NOT_COMPARED
    lines = [
        f"**kvtiers diff**: {'no errors' if not total else f'{total} error(s)'} in {len(changes)} environment(s){flag}",
        "",
        *(f"- {c.summary()}{flag}" for c in changes),
        *preface,
    ]
    for change in changes:
        lines += ["", f"### {change.name}", ""]
        if change.errors:
            lines += ["**Errors**", "", *(f"- {e}" for e in change.errors), ""]
        if change.warnings:
            lines += ["Warnings", "", *(f"- {w}" for w in change.warnings), ""]
        if change.chart:
            lines += [change.chart.detail, ""]
        if change.groups:
            lines += _table(
                [
                    "HyperPod group",
                    "nodes",
                    "pods that stop with them, and their caches",
                    "fullest node (asked of allocatable)",
                ],
                [
                    [g.name, "; ".join(g.changes) or "unchanged", "; ".join(g.pods) or "-", "; ".join(g.fullest) or "-"]
                    for g in change.groups
                ],
            ) + [""]
        for replaced in change.system_nodes:
            lines += ["Node group replaced", "", *(f"- {line}" for line in replaced.lines()), ""]
        endpoints = [e for e in change.endpoints if e.status != "unchanged"]
        unknown = any(m.startswith(RECORD_FILE) for m in change.missing_records)
        kept = "unknown: no kvtiers endpoint record" if unknown else "kept"
        if endpoints:
            lines += _table(
                ["endpoint", "status", "L0/L1 lost on", "L2", "why"],
                [
                    [e.name, e.status, f"{e.l0_l1_lost} pod(s)", e.l2 or kept, "; ".join(e.l2_reasons) or "-"]
                    for e in endpoints
                ],
            ) + [""]
        if change.workloads:
            lines += _table(
                ["workload", "change", "replicas", "pace", "GPUs idle at a time", "node drains"],
                [
                    [
                        str(w.ref),
                        CHANGE_WORDS.get(w.change, w.change),
                        _replicas(w),
                        w.pace if w.change == "restart" else "-",
                        f"{w.gpus_idle}" + (f" (+{w.surge_gpus} surge GPUs)" if w.surge_gpus else ""),
                        w.drain or "no PodDisruptionBudget",
                    ]
                    for w in change.workloads
                ],
            ) + [""]
        effects = [n for w in change.workloads for n in w.notes] + [e.reclaim for e in change.endpoints if e.reclaim]
        if effects:
            lines += ["Effects", "", *(f"- {e}" for e in effects), ""]
        touched = [c for c in change.resources if c.action is not CfnAction.UPDATE or c.error]
        updated = [c for c in change.resources if c.action is CfnAction.UPDATE and not c.error]
        if touched:
            lines += _table(
                ["stack", "resource", "type", "CloudFormation", "because"],
                [[c.stack, c.logical_id, c.type, c.action.value, "; ".join(c.because) or "-"] for c in touched],
            ) + [""]
        if updated:
            lines.append(f"Updated in place: {', '.join(c.logical_id for c in updated)}")
        lines += _deleted(change.deletions)
    return "\n".join(lines).rstrip() + "\n"
