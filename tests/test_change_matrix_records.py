"""A construct user's cloud assembly: the templates without the records only the kvtiers app writes
(``kvtiers-endpoints.json``, ``kvtiers-placement.json``, ``kvtiers-intended-deletions.json``). What needs them is
not computed, and the report says so instead of reporting the L2 as kept."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvtiers.change.deletions import INTENDED_DELETIONS_FILE
from kvtiers.change.record import PLACEMENT_FILE, RECORD_FILE
from kvtiers.change.report import assembly_change, markdown
from tests.test_change_matrix import _rename


def _without_records(assembly: Path, folder: Path) -> Path:
    shutil.copytree(assembly, folder)
    for name in (RECORD_FILE, PLACEMENT_FILE, INTENDED_DELETIONS_FILE):
        (folder / name).unlink()
    return folder


def test_a_rename_without_kvtiers_records_says_the_l2_is_unknown_and_what_was_not_computed(
    environment_assemblies, tmp_path
):
    before = _without_records(environment_assemblies.shipped("dev"), tmp_path / "base")
    after = _without_records(environment_assemblies.edited("dev", _rename), tmp_path / "change")
    change = assembly_change("dev rename", before, after)
    text = markdown([change])
    rows = [line for line in text.splitlines() if line.startswith(("| qwen2-7b |", "| qwen2-7b-next |"))]
    assert rows and all("| unknown: no kvtiers endpoint record |" in row for row in rows), rows
    assert not [row for row in rows if "| kept |" in row]
    assert "no kvtiers records (" in change.summary()
    assert change.summary().endswith("node, L2 and operator-capacity effects not computed")
    assert f"{RECORD_FILE} (base)" in change.summary() and f"{PLACEMENT_FILE} (change)" in change.summary()


def test_with_the_records_the_summary_claims_nothing_missing(environment_assemblies):
    dev = environment_assemblies.shipped("dev")
    change = assembly_change("dev", dev, environment_assemblies.edited("dev", _rename))
    assert "not computed" not in change.summary()
    assert "unknown: no kvtiers endpoint record" not in markdown([change])
