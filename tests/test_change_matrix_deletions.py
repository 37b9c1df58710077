"""Change-matrix rows for deletions (kvtiers.change.deletions), on real synths of the example environments: turning
prod's internal load balancer off prunes the NLB Service, renaming dev's L2 claim deletes the claim; each is an
error until the environment file names it in ``intended_deletions``, which the synth carries into the assembly.

Each variant is synthesized once, with the acknowledgment; the unacknowledged assembly is the same folder with an
empty acknowledgment file (the acknowledgments reach only that file, never a template).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtiers.change.deletions import INTENDED_DELETIONS_FILE, read_intended_deletions
from kvtiers.change.report import EnvironmentChange, assembly_change, markdown

NLB = "Service serving/qwen25-32b-router-nlb"
CLAIM = "PersistentVolumeClaim serving/curvine-l2"


def _load_balancer_off(raw: dict) -> None:
    next(e for e in raw["serving"]["endpoints"] if e["name"] == "qwen25-32b")["internal_load_balancer"] = False
    raw["intended_deletions"] = [{"target": NLB, "reason": "clients call the router's ClusterIP Service now"}]


def _claim_renamed(raw: dict) -> None:
    raw["serving"]["l2_claim_name"] = "curvine-l2-next"
    raw["intended_deletions"] = [{"target": CLAIM, "reason": "a new claim: the L2 starts cold on purpose"}]


ROWS: dict[str, tuple[str, Callable[[dict], None], str]] = {
    "load-balancer-off": ("prod", _load_balancer_off, NLB),
    "claim-renamed": ("dev", _claim_renamed, CLAIM),
}


@pytest.fixture(scope="module")
def assemblies(environment_assemblies, tmp_path_factory) -> dict[str, tuple[Path, Path, Path]]:
    """Per row: the shipped environment's assembly, the change's (acknowledged), and the same without the
    acknowledgment."""
    found = {}
    for row, (env, change, _) in ROWS.items():
        acknowledged = environment_assemblies.edited(env, change)
        unacknowledged = tmp_path_factory.mktemp(row) / "unacknowledged"
        shutil.copytree(acknowledged, unacknowledged)
        (unacknowledged / INTENDED_DELETIONS_FILE).write_text("[]\n")
        found[row] = (environment_assemblies.shipped(env), acknowledged, unacknowledged)
    return found


def _change(assemblies, row: str, *, acknowledged: bool) -> EnvironmentChange:
    before, with_it, without_it = assemblies[row]
    return assembly_change(row, before, with_it if acknowledged else without_it)


@pytest.mark.parametrize("row", list(ROWS))
def test_the_synth_carries_the_acknowledgment_into_the_assembly(assemblies, row):
    (entry,) = read_intended_deletions(assemblies[row][1])
    assert entry.target == ROWS[row][2] and entry.reason


@pytest.mark.parametrize("row", list(ROWS))
def test_the_deletion_is_an_error_until_acknowledged(assemblies, row):
    target = ROWS[row][2]
    refused = _change(assemblies, row, acknowledged=False)
    assert [e for e in refused.errors if e.startswith(f"deleted: {target} (pruned by ")], refused.errors
    assert f"| {target} | pruned by " in markdown([refused])
    accepted = _change(assemblies, row, acknowledged=True)
    assert accepted.errors == ()
    (listed,) = [d for d in accepted.deletions.deleted if d.target == target]
    assert listed.intended and listed.loses
    assert accepted.deletions.stale == ()


def test_turning_the_load_balancer_off_loses_its_dns_name_and_only_that(assemblies):
    refused = _change(assemblies, "load-balancer-off", acknowledged=False)
    (error,) = refused.errors
    assert "its load balancer and DNS name" in error
    assert [str(r) for r in refused.outcome.may_remain] == []


def test_renaming_the_claim_says_its_storage_class_keeps_the_data(assemblies):
    refused = _change(assemblies, "claim-renamed", acknowledged=False)
    (error,) = refused.errors
    assert "StorageClass curvine-l2's reclaimPolicy Retain" in error


def test_an_acknowledgment_carried_into_the_next_change_is_a_warning_to_remove_it(assemblies):
    """The change merged, its acknowledgment left in the file: the next pull request's diff (the merged assembly on
    both sides) passes and says to remove it."""
    _, acknowledged, _ = assemblies["claim-renamed"]
    following = assembly_change("next", acknowledged, acknowledged)
    assert following.errors == ()
    (warning,) = [w for w in following.warnings if CLAIM in w]
    assert warning.startswith(f"acknowledgment left over: intended_deletions names {CLAIM}")


def test_an_acknowledgment_new_in_a_change_that_deletes_nothing_is_stale(assemblies, tmp_path):
    """An entry added with a change that does not delete it (a wrong name): an error."""
    shipped, acknowledged, _ = assemblies["claim-renamed"]
    misnamed = tmp_path / "misnamed"
    shutil.copytree(shipped, misnamed)
    shutil.copy(acknowledged / INTENDED_DELETIONS_FILE, misnamed / INTENDED_DELETIONS_FILE)
    (error,) = assembly_change("misnamed", shipped, misnamed).errors
    assert error.startswith(f"stale acknowledgment: intended_deletions names {CLAIM}, which this change adds")
    assert "is deployed" not in error
