"""The synthesized templates and Kubernetes objects of both environments match the committed snapshot, parsed
(tests/golden_snapshot.py says what does not count). A refactor keeps them; a deliberate change regenerates them
in the same commit, so the diff of tests/golden/ shows every rendered difference."""

from __future__ import annotations

import json

import pytest

from tests.golden_snapshot import _normalize, golden_path, snapshot


def _differences(expected, actual, path="") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = []
        for key in sorted(expected.keys() | actual.keys()):
            if key not in actual:
                found.append(f"{path}/{key}: removed")
            elif key not in expected:
                found.append(f"{path}/{key}: added")
            else:
                found.extend(_differences(expected[key], actual[key], f"{path}/{key}"))
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: {json.dumps(expected)[:200]} -> {json.dumps(actual)[:200]}"]


def _joined(value):
    """A manifest that embeds deploy-time values is a CloudFormation ``Fn::Join`` of JSON text around them: compare
    it parsed, each value marked in place, so that the key order of the text does not count (as everywhere else)."""
    if isinstance(value, dict):
        join = value.get("Fn::Join")
        if len(value) == 1 and isinstance(join, list) and len(join) == 2 and join[0] == "":
            text = "".join(
                part if isinstance(part, str) else json.dumps(f"<cfn {json.dumps(part, sort_keys=True)}>")[1:-1]
                for part in join[1]
            )
            try:
                return {"Fn::Join (parsed)": _normalize(json.loads(text))}
            except ValueError:
                pass
        return {key: _joined(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_joined(item) for item in value]
    return value


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_rendered_output_matches_the_snapshot(environment, request):
    synthesized = request.getfixturevalue(f"{environment}_synth")
    expected = _joined(json.loads(golden_path(environment).read_text()))
    actual = _joined(json.loads(json.dumps(snapshot(synthesized.outdir))))
    differences = _differences(expected, actual)
    assert not differences, "\n".join(differences[:40])


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
