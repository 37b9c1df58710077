"""The HyperPod dependency chart as a synth pinned it, and what deploying another pin does.

A review synth (the one ``kvtiers diff`` runs) leaves the chart out of the templates: it is a Helm chart from a git
checkout in ``vendor/`` that an offline synth does not have. So the synth records the pin beside the templates
(``kvtiers-dependency-chart.json``), and the diff reads the pin from both records: a new revision is a Helm upgrade
on deploy, whatever ``vendor/`` holds on the machine that runs the diff.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

CHART_RECORD_FILE = "kvtiers-dependency-chart.json"


@dataclass(frozen=True, kw_only=True)
class ChartRecord:
    source: str
    """``asset`` (the platform stack deploys the vendored chart) or ``external`` (installed by hand)."""
    revision: str
    """The commit of aws/sagemaker-hyperpod-cli the environment pins."""
    repository: str
    release: str
    """The Helm release and its namespace, ``<namespace>/<release>``."""


def write_chart_record(outdir: Path, record: ChartRecord) -> Path:
    path = Path(outdir) / CHART_RECORD_FILE
    path.write_text(json.dumps(asdict(record), indent=1, sort_keys=True) + "\n")
    return path


def read_chart_record(outdir: Path) -> ChartRecord | None:
    """The record of a cloud assembly, or None for one synthesized without it (an older kvtiers, another app)."""
    path = Path(outdir) / CHART_RECORD_FILE
    if not path.is_file():
        return None
    return ChartRecord(**json.loads(path.read_text()))


@dataclass(frozen=True)
class ChartChange:
    summary: str
    """A few words for the environment's summary line."""
    detail: str
    """What the deploy does, and what to run."""


def chart_change(before: ChartRecord | None, after: ChartRecord | None) -> ChartChange | None:
    """What the deploy does to the chart, or None when the pin stays. A side without a record says that the chart
    was not compared: never silence."""
    if before is None and after is None:
        return None
    if before is None or after is None:
        side = "base" if before is None else "new"
        return ChartChange(
            "dependency chart not compared",
            (
                f"HyperPod dependency chart: not compared (the {side} synth wrote no {CHART_RECORD_FILE}: an older "
                "kvtiers); compare hyperpod.dependency_chart in the two environment files yourself"
            ),
        )
    if before == after:
        return None
    if before.source != after.source:
        return ChartChange(f"dependency chart {before.source} -> {after.source}", _source_change(before, after))
    moved = f"dependency chart {before.revision[:7]} -> {after.revision[:7]}"
    if after.source == "external":
        return ChartChange(
            f"{moved} (yours to upgrade)",
            (
                f"HyperPod dependency chart: revision {before.revision} -> {after.revision}; it is installed by hand "
                "(source: external), so the deploy does not touch it: upgrade the release yourself at the new revision "
                '(docs/deploying.md, "Deploying with an external dependency chart")'
            ),
        )
    return ChartChange(
        f"{moved} (Helm upgrade)",
        (
            f"HyperPod dependency chart: revision {before.revision} -> {after.revision}: the platform stack runs "
            f"`helm upgrade --install` of release {after.release} with the new chart (a failure fails the stack update, "
            "and CloudFormation's rollback upgrades the release back). Run `make hyperpod-chart` before the deploy; what "
            f"the chart itself changes: `git diff {before.revision[:12]} {after.revision[:12]} -- helm_chart/` in "
            f"{after.repository}"
        ),
    )


def _source_change(before: ChartRecord, after: ChartRecord) -> str:
    if after.source == "external":
        return (
            "HyperPod dependency chart: source asset -> external: the platform stack deletes its HelmChart, whose "
            f"handler runs `helm uninstall` of release {before.release} (the device plugins and the health-monitoring "
            "agent of every HyperPod node) in the cleanup after the update: install yours after the deploy (until "
            "then the nodes run without the chart)"
        )
    return (
        "HyperPod dependency chart: source external -> asset: the platform stack runs `helm upgrade --install` of "
        f"release {after.release} at revision {after.revision}: it takes over a release of that name you installed, "
        "and fails if yours has another name (Helm refuses objects another release owns)"
    )
