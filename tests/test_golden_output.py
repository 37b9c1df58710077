"""The synthesized templates and Kubernetes objects of both environments match the committed snapshot, parsed
(tests/golden_snapshot.py says what does not count). A refactor keeps them; a deliberate change regenerates them
in the same commit, so the diff of tests/golden/ shows every rendered difference."""

from __future__ import annotations

import json

import pytest

from tests.golden_snapshot import golden_path, snapshot


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


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_rendered_output_matches_the_snapshot(environment, request):
    synthesized = request.getfixturevalue(f"{environment}_synth")
    expected = json.loads(golden_path(environment).read_text())
    actual = json.loads(json.dumps(snapshot(synthesized.outdir)))
    differences = _differences(expected, actual)
    assert not differences, "\n".join(differences[:40])


def test_the_comparison_sees_a_changed_value(dev_synth):
    expected = json.loads(golden_path("dev").read_text())
    name = next(iter(expected["kubernetes"]))
    expected["kubernetes"][name]["metadata"]["name"] = "renamed"
    assert _differences(expected, json.loads(json.dumps(snapshot(dev_synth.outdir))))
