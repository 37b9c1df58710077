"""docs/curvine-contract.md names only tests that exist, and every upstream-facing Curvine test is in it."""

from __future__ import annotations

import ast
import re

from tests.synth import ROOT

DOC = ROOT / "docs" / "curvine-contract.md"


def _test_functions() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    return names


def test_every_test_the_contract_names_exists():
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", DOC.read_text()))
    assert named, "the contract names no test"
    assert not named - _test_functions(), sorted(named - _test_functions())


def test_every_upstream_curvine_test_is_in_the_contract():
    tree = ast.parse((ROOT / "tests" / "test_curvine_l2_upstream.py").read_text())
    upstream = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", DOC.read_text()))
    assert not upstream - named, sorted(upstream - named)


def test_contract_cites_the_tags_the_images_pin():
    from kvtiers.config.schema import CurvineImages

    images, text = CurvineImages(), DOC.read_text()
    for image in (images.runtime_image, images.csi_image, images.csi_provisioner_image):
        assert f"`{image}`" in text or image in text, image
    assert "tag `v0.4.1`" in text and "tag `v5.2.0`" in text
