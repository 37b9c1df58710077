"""The synthesized templates and Kubernetes objects of both environments match the committed snapshot, parsed
(tests/golden_snapshot.py says what does not count). A refactor keeps them; a deliberate change regenerates them
in the same commit, so the diff of tests/golden/ shows every rendered difference."""

from __future__ import annotations

import json

import pytest

from tests.golden_snapshot import _differences, _joined, differences, golden_path, snapshot


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_rendered_output_matches_the_snapshot(environment, request):
    synthesized = request.getfixturevalue(f"{environment}_synth")
    expected = json.loads(golden_path(environment).read_text())
    found = differences(expected, json.loads(json.dumps(snapshot(synthesized.outdir))))
    assert not found, "\n".join(found[:40])


def test_the_comparison_sees_a_changed_value(dev_synth):
    expected = json.loads(golden_path("dev").read_text())
    name = next(iter(expected["kubernetes"]))
    expected["kubernetes"][name]["metadata"]["name"] = "renamed"
    assert _differences(expected, json.loads(json.dumps(snapshot(dev_synth.outdir))))


def test_a_joined_manifest_compares_parsed_with_its_deploy_time_values_in_place():
    token = {"Ref": "Volume"}
    manifest = {"Fn::Join": ["", ['[{"kind":"PersistentVolume","spec":{"csi":{"volumeHandle":"', token, '","a":1}}}]']]}
    reordered = {
        "Fn::Join": ["", ['[{"spec":{"csi":{"a":1,"volumeHandle":"', token, '"}},"kind":"PersistentVolume"}]']]
    }
    assert not _differences(_joined(manifest), _joined(reordered))
    other = {
        "Fn::Join": [
            "",
            ['[{"kind":"PersistentVolume","spec":{"csi":{"volumeHandle":"', {"Ref": "Other"}, '","a":1}}}]'],
        ]
    }
    assert _differences(_joined(manifest), _joined(other))
