"""The records a synth writes into its cloud assembly beside the templates, for ``kvtiers diff``.

The endpoint record (``kvtiers-endpoints.json``): per endpoint, its L2
namespace as the synth computed it (``kvtiers.config.model.l2_namespace``, the one computation: the engine's), the L2
location its pods mount (``l2_mount``, the value the wiring passes to the serving chart) and the engine image.
``kvtiers diff`` compares two records: a new L2 location is a cold L2 for the whole endpoint, and the fields that
differ say why. The templates cannot say it: they carry only the directory's hash.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORD_FILE = "kvtiers-endpoints.json"


@dataclass(frozen=True, kw_only=True)
class EndpointRecord:
    serving: str
    """``self_managed`` or ``operator``."""
    engine_image: str
    l2: bool
    """Whether the endpoint reads and writes the L2."""
    l2_directory: str
    """The endpoint's L2 directory (``L2Namespace.directory``)."""
    l2_namespace: dict[str, Any]
    """The fields of its ``L2Namespace``, as the synth computed them."""
    l2_location: str = ""
    """Where its chunks live: the claim and the ``sub_path`` its pods mount (``<claim>/<owner>/<directory>``, from
    the ``L2Mount`` the synth passes to the chart). Empty in records of an older kvtiers."""

    def l2_moved(self, before: EndpointRecord) -> bool:
        """Whether the endpoint reads another L2 directory than ``before``'s: the full location when both records
        have it, else the namespace directory."""
        if self.l2_location and before.l2_location:
            return self.l2_location != before.l2_location
        return self.l2_directory != before.l2_directory

    def l2_reasons(self, before: EndpointRecord) -> tuple[str, ...]:
        """Why the L2 moved from ``before``'s: the engine image, each namespace field that differs, and the
        location (owner ``endpoint-<name>`` or ``shared-<group>``, claim) when it changed."""
        old, new = before.l2_namespace, self.l2_namespace
        reasons = [
            f"{key.replace('_', ' ')} {old.get(key)} -> {new[key]}" for key in sorted(new) if old.get(key) != new[key]
        ]
        if before.engine_image != self.engine_image:
            reasons.insert(0, f"engine image {before.engine_image} -> {self.engine_image}")
        if before.l2_location and self.l2_location and before.l2_location != self.l2_location:
            reasons.append(f"L2 location {before.l2_location} -> {self.l2_location}")
        return tuple(reasons)


@dataclass(frozen=True)
class Record:
    environment: str
    endpoints: dict[str, EndpointRecord]


def write_endpoint_record(outdir: Path, *, environment: str, endpoints: dict[str, EndpointRecord]) -> Path:
    path = Path(outdir) / RECORD_FILE
    data = {
        "environment": environment,
        "endpoints": {name: asdict(record) for name, record in endpoints.items()},
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def read_endpoint_record(outdir: Path) -> Record | None:
    """The record of a cloud assembly, or None for one synthesized without it (another app, an older kvtiers)."""
    path = Path(outdir) / RECORD_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    endpoints = {name: EndpointRecord(**e) for name, e in data["endpoints"].items()}
    return Record(environment=data["environment"], endpoints=endpoints)


PLACEMENT_FILE = "kvtiers-placement.json"


@dataclass(frozen=True, kw_only=True)
class PlacedRecord:
    """One workload as the placement model puts it on the HyperPod groups (:class:`kvtiers.placement.Workload`)."""

    name: str
    groups: list[str]
    spread: str
    """``every_node``, ``one_per_node``, ``gpu_bound`` or ``any_node`` (:mod:`kvtiers.placement`)."""
    replicas: int
    gpus: int
    """GPUs one pod asks."""
    spread_evenly: bool = False
    engines_of: str | None = None
    """The endpoint whose engines (L0 and L1 caches) these pods are."""


@dataclass(frozen=True, kw_only=True)
class GroupRecord:
    """One HyperPod group as a synth placed its pods (:mod:`kvtiers.placement`): its nodes and, per resource, what
    its fullest node asks of what it offers."""

    instance_type: str
    count: int
    threads_per_core: int
    fullest: dict[str, str]
    """Resource label -> ``<asked> of <offered>``, formatted."""
    workloads: list[str]
    """The workloads registered on the group, by name."""
    gpus_per_node: int = 0
    """GPUs one node offers. 0 in records of an older kvtiers."""
    placed: list[PlacedRecord] = field(default_factory=list)
    """How each of ``workloads`` is placed. Empty in records of an older kvtiers."""


def write_placement_record(outdir: Path, groups: dict[str, GroupRecord]) -> Path:
    path = Path(outdir) / PLACEMENT_FILE
    path.write_text(json.dumps({name: asdict(g) for name, g in groups.items()}, indent=1, sort_keys=True) + "\n")
    return path


def read_placement_record(outdir: Path) -> dict[str, GroupRecord] | None:
    """The placement record of a cloud assembly, or None for one synthesized without it."""
    path = Path(outdir) / PLACEMENT_FILE
    if not path.is_file():
        return None
    groups = {}
    for name, g in json.loads(path.read_text()).items():
        placed = [PlacedRecord(**w) for w in g.pop("placed", [])]
        groups[name] = GroupRecord(**g, placed=placed)
    return groups


def missing_records(
    endpoints: tuple[Record | None, Record | None], placements: tuple[dict[str, GroupRecord] | None, ...]
) -> tuple[str, ...]:
    """The records a side lacks, ``<file> (base|change)``: an assembly of a construct user's own app has none (only
    the kvtiers app writes them), and what needs them is then not computed (:func:`not_computed`)."""
    files = ((RECORD_FILE, endpoints), (PLACEMENT_FILE, placements))
    return tuple(
        f"{file} ({side})"
        for file, records in files
        for side, record in zip(("base", "change"), records, strict=True)
        if record is None
    )


def not_computed(missing: tuple[str, ...]) -> str | None:
    """The report's plain statement of what ``missing`` (:func:`missing_records`) leaves out: without endpoint
    records no L2 effect (cold, renamed, abandoned directories); without placement records no node effect and no
    operator endpoint's capacity."""
    if not missing:
        return None
    effects = set()
    if any(m.startswith(PLACEMENT_FILE) for m in missing):
        effects |= {"node", "operator-capacity"}
    if any(m.startswith(RECORD_FILE) for m in missing):
        effects.add("L2")
    named = sorted(effects, key=["node", "L2", "operator-capacity"].index)
    listed = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
    return f"no kvtiers records ({', '.join(missing)} missing): {listed} effects not computed"
