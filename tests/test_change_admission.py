"""What the API server refuses of a manifest update: claim growth its resize admission plugin forbids, and the
immutable fields of every kind kvtiers renders (the table in docs/change-model.md and the rules agree)."""

from __future__ import annotations

import re

import pytest

from kvtiers.change.immutable import RULES, WITHOUT_IMMUTABLE_FIELDS
from kvtiers.change.report import environment_change
from tests.conftest import ROOT
from tests.test_change_model import manifest, obj, stack


def _claim(size: str, storage_class: str | None = "curvine-l2") -> dict:
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    return obj(
        "v1",
        "PersistentVolumeClaim",
        "curvine-l2",
        **spec,
        **({"storageClassName": storage_class} if storage_class else {}),
    )


def _class(**fields) -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "curvine-l2"},
        "provisioner": "curvine",
        **fields,
    }


def _change(before: list[dict], after: list[dict]):
    return environment_change("dev", stack(manifest("Storage", before)), stack(manifest("Storage", after)), None, None)


def test_growing_a_claim_whose_class_does_not_allow_expansion_is_an_error():
    change = _change(
        [_class(allowVolumeExpansion=False), _claim("100Gi")], [_class(allowVolumeExpansion=False), _claim("200Gi")]
    )
    (error,) = change.errors
    assert "serving/curvine-l2" in error
    assert "100Gi -> 200Gi" in error and "does not allow volume expansion" in error
    assert "PersistentVolumeClaimResize" in error


def test_a_class_without_allow_volume_expansion_refuses_growth_too():
    (error,) = _change([_class(), _claim("100Gi")], [_class(), _claim("101Gi")]).errors
    assert "allowVolumeExpansion unset or false" in error


def test_a_claim_without_a_class_is_not_dynamically_provisioned_and_cannot_grow():
    (error,) = _change([_claim("1Gi", None)], [_claim("2Gi", None)]).errors
    assert "only a dynamically provisioned claim" in error


def test_growth_is_allowed_when_the_class_allows_expansion_and_an_unchanged_size_is_no_resize():
    assert (
        _change(
            [_class(allowVolumeExpansion=True), _claim("100Gi")], [_class(allowVolumeExpansion=True), _claim("200Gi")]
        ).errors
        == ()
    )
    assert _change([_class(), _claim("100Gi")], [_class(), _claim("100Gi")]).errors == ()


# ---------------------------------------------------------------------------------------- the immutable-fields table


def _table() -> dict[tuple[str, str], str]:
    """(API group, kind) -> the immutable-fields cell of each row of docs/change-model.md's table."""
    text = (ROOT / "docs" / "change-model.md").read_text()
    section = text.split("## Immutable fields", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[1].startswith("`") or "apiVersion" in cells[1]:
            continue
        api_version = cells[1].strip("`")
        group = api_version.rpartition("/")[0]
        rows[group, cells[0]] = cells[2]
    return rows


def test_the_table_and_the_rules_name_the_same_kinds_and_fields():
    table = _table()
    ruled: dict[tuple[str, str], set[str]] = {}
    for rule in RULES:
        names = ruled.setdefault((rule.group, rule.kind), set())
        names |= set(rule.fields) | set(rule.except_keys)
        names |= {rule.all_of} if rule.all_of else set()
        names |= {rule.when} if rule.when else set()
    assert set(table) == set(ruled) | set(WITHOUT_IMMUTABLE_FIELDS)
    for key, names in ruled.items():
        assert set(re.findall(r"`([^`]+)`", table[key])) == names, key
    for key in WITHOUT_IMMUTABLE_FIELDS:
        assert table[key].startswith("none"), key


@pytest.mark.parametrize("key", sorted(WITHOUT_IMMUTABLE_FIELDS))
def test_a_kind_without_immutable_fields_has_no_rule(key):
    assert key not in {(r.group, r.kind) for r in RULES}


def test_the_beta_class_annotation_names_the_class_as_the_plugin_reads_it():
    def annotated(size: str) -> dict:
        claim = _claim(size, "other")
        claim["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "curvine-l2"}
        return claim

    (error,) = _change([_class(), annotated("1Gi")], [_class(), annotated("2Gi")]).errors
    assert "StorageClass curvine-l2 does not allow volume expansion" in error
