"""Admission truths and endpoint effects on real synths of both example environments: a claim resize the API
server refuses, an endpoint rename (a new, empty L2 and an abandoned directory), an operator endpoint settings
change and rename on prod (an outage and a new SageMaker endpoint name), and every kind the synths render has a row in the
immutable-fields table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvtiers.change.manifests import ObjectRef, load_templates, manifest_resources
from kvtiers.change.report import EnvironmentChange
from tests.test_change_admission import _table
from tests.test_change_matrix import _endpoint, _endpoint_effect, shipped, variant_changes  # noqa: F401 (a fixture)


def _claim_grows(raw: dict) -> None:
    raw["serving"]["l2_claim_size_gib"] = raw["serving"].get("l2_claim_size_gib", 100) * 2


def _rename(raw: dict) -> None:
    _endpoint(raw)["name"] = "qwen2-7b-v2"


def _operator_settings(raw: dict) -> None:
    _endpoint(raw, "qwen2-7b-chat")["l1_gib"] += 4


def _operator_rename(raw: dict) -> None:
    _endpoint(raw, "qwen2-7b-chat")["name"] = "qwen2-7b-talk"


VARIANTS: dict[tuple[str, str], Callable[[dict], None]] = {
    ("dev", "claim"): _claim_grows,
    ("dev", "rename"): _rename,
    ("prod", "operator"): _operator_settings,
    ("prod", "operator-rename"): _operator_rename,
}


@pytest.fixture(scope="module")
def changes(environment_assemblies) -> dict[tuple[str, str], EnvironmentChange]:
    return variant_changes(environment_assemblies, VARIANTS)


def test_growing_the_l2_claim_is_refused_by_the_resize_admission(changes):
    change = changes["dev", "claim"]
    (error,) = change.errors
    assert error.startswith("refused: PersistentVolumeClaim serving/curvine-l2: spec.resources.requests.storage")
    assert "100Gi -> 200Gi" in error and "StorageClass curvine-l2 does not allow volume expansion" in error


def test_a_renamed_endpoint_has_a_new_empty_l2_and_its_old_directory_is_abandoned(changes):
    change = changes["dev", "rename"]
    new, old = _endpoint_effect(change, "qwen2-7b-v2"), _endpoint_effect(change, "qwen2-7b")
    assert new.status == "added" and new.l2 and new.l2.startswith("new, empty L2: curvine-l2/endpoint-qwen2-7b-v2/")
    assert new.l2_reasons == ("renamed from qwen2-7b (the same L2 namespace, under another owner directory)",)
    assert old.abandoned and old.abandoned.startswith("curvine-l2/endpoint-qwen2-7b/")
    assert "1 endpoint(s) with a cold L2" in change.summary()
    assert old.reclaim and f"rm -r /l2/{old.abandoned.split('/', 1)[1]}" in old.reclaim


def test_an_operator_settings_change_is_a_full_outage_and_a_new_endpoint_name(changes):
    change = changes["prod", "operator"]
    (warning,) = [w for w in change.warnings if w.startswith("operator endpoint qwen2-7b-chat")]
    assert "Clients must switch SageMaker endpoint name qwen2-7b-chat-" in warning
    assert "All 2 old pod(s) (1 GPU(s) each) stop at once" in warning
    assert "group g6e-small has 0 of 2 GPUs free" in warning and "full outage" in warning
    assert "1 operator endpoint(s) replaced (new name)" in change.summary()
    old = next(w for w in change.workloads if w.change == "delete" and w.endpoint == "qwen2-7b-chat")
    assert old.gpus_per_pod == 1


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_rendered_kind_has_a_row_in_the_immutable_fields_table(shipped, env):  # noqa: F811
    rendered = {
        (ref.group, ref.kind)
        for resource in manifest_resources(load_templates(Path(shipped[env]))).values()
        for ref in map(ObjectRef.of, resource.objects)
    }
    assert rendered - set(_table()) == set()


def test_an_operator_endpoint_rename_is_a_replacement_with_a_new_empty_l2(changes):
    change = changes["prod", "operator-rename"]
    (warning,) = [w for w in change.warnings if w.startswith("operator endpoint qwen2-7b-talk")]
    assert "(renamed from qwen2-7b-chat)" in warning and "full outage" in warning
    new, old = _endpoint_effect(change, "qwen2-7b-talk"), _endpoint_effect(change, "qwen2-7b-chat")
    assert new.l2 and new.l2.startswith("new, empty L2: curvine-l2/endpoint-qwen2-7b-talk/")
    assert old.abandoned and old.abandoned.startswith("curvine-l2/endpoint-qwen2-7b-chat/")
