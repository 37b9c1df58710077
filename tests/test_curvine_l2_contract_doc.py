"""docs/curvine-contract.md names only tests that exist, and every upstream-facing Curvine test is in it."""

from __future__ import annotations

from tests.contract_docs import defined_tests, existing_tests, named_tests
from tests.synth import ROOT

DOC = ROOT / "docs" / "curvine-contract.md"


def test_every_test_the_contract_names_exists():
    named = named_tests(DOC.read_text())
    assert named, "the contract names no test"
    assert not named - existing_tests(), sorted(named - existing_tests())


def test_every_upstream_curvine_test_is_in_the_contract():
    upstream = defined_tests(ROOT / "tests" / "test_curvine_l2_upstream.py")
    assert not upstream - named_tests(DOC.read_text()), sorted(upstream - named_tests(DOC.read_text()))


def test_contract_cites_the_tags_the_images_pin():
    from kvtiers.config.schema import CurvineImages

    images, text = CurvineImages(), DOC.read_text()
    for image in (images.runtime_image, images.csi_image, images.csi_provisioner_image):
        assert f"`{image}`" in text or image in text, image
    assert "tag `v0.4.1`" in text and "tag `v5.2.0`" in text
