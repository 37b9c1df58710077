"""What a deploy does to the HyperPod groups, from two synths' placement records: nodes added or removed, an
instance type changed (every node replaced) or threads per core changed (new nodes only), and each resource of the
fullest node before and after. A change whose pods no longer fit never gets here: its synth is refused (the HyperPod cluster's
placement check), and ``kvtiers diff`` reports that synth's error."""

from __future__ import annotations

from dataclasses import dataclass

from kvtiers.change.record import GroupRecord
from kvtiers.k8s_charts.names import CURVINE_WORKER


@dataclass(frozen=True)
class GroupChange:
    name: str
    before: GroupRecord | None
    after: GroupRecord | None

    @property
    def changes(self) -> tuple[str, ...]:
        """What happens to the group's nodes, one line each."""
        before, after = self.before, self.after
        if before is None:
            return ("new group",)
        worker = _runs_a_worker(before)
        l2 = "; the L2 blocks of its Curvine worker are lost" if worker else ""
        if after is None:
            return (f"group removed: its {before.count} node(s) terminate with every pod on them{l2}",)
        found = []
        if before.instance_type != after.instance_type:
            found.append(
                f"instance type {before.instance_type} -> {after.instance_type}: every node is replaced (its pods "
                f"restart{l2})"
            )
        if before.threads_per_core != after.threads_per_core:
            found.append(
                f"threads per core {before.threads_per_core} -> {after.threads_per_core}: EC2 fixes CPU options when "
                "an instance launches, so running nodes keep theirs until HyperPod replaces them (whether it accepts "
                "the change for a running group is AWS's to confirm), and the placement check assumes the new value"
            )
        if after.count < before.count:
            found.append(
                f"{before.count} -> {after.count} nodes: {before.count - after.count} node(s) terminate; their pods "
                "reschedule on the others" + ("; the L2 blocks of their Curvine workers are lost" if worker else "")
            )
        elif after.count > before.count:
            found.append(f"{before.count} -> {after.count} nodes")
        return tuple(found)

    @property
    def fullest(self) -> tuple[str, ...]:
        """Each resource of the fullest node whose figure changed, ``before -> after``."""
        if self.before is None or self.after is None:
            return ()
        return tuple(
            f"{label} {self.before.fullest.get(label, '-')} -> {figure}"
            for label, figure in self.after.fullest.items()
            if self.before.fullest.get(label) != figure
        )


def _runs_a_worker(group: GroupRecord) -> bool:
    return any(name.endswith(f"/{CURVINE_WORKER}") for name in group.workloads)


def group_changes(
    before: dict[str, GroupRecord] | None, after: dict[str, GroupRecord] | None
) -> tuple[GroupChange, ...]:
    """The groups whose nodes or fullest node change (none when either synth has no placement record)."""
    if before is None or after is None:
        return ()
    found = [GroupChange(name, before.get(name), after.get(name)) for name in sorted({*before, *after})]
    return tuple(g for g in found if g.changes or g.fullest)
