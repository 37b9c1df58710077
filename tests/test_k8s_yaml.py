"""The per-object YAML in ``cdk.out/k8s/`` is written by a faster copy of PyYAML's emitter
(``kvtiers.stacks.k8s_yaml.dump_yaml``): it must write exactly what ``yaml.safe_dump(..., sort_keys=True)`` writes, so
that the files never change with the speed-up. Compared on the rendered objects of both environments and on seeded
random strings made of the characters PyYAML's styles and escapes turn on."""

from __future__ import annotations

import io
import random

import pytest
import yaml

from kvtiers.stacks.k8s_yaml import _SafeDumper, dump_yaml
from tests.conftest import rendered_objects

# Characters and pairs that decide a scalar's style in PyYAML's analysis, or are escaped in its double-quoted style.
SPECIAL = [
    *" \t\n\r\x00\x07\x1b\x85\xa0\u2028\u2029\ufeff\U0001f600é\"'\\#:-?,[]{}&*!|>%@`.",
    "---",
    "...",
    ": ",
    " #",
    "- ",
    "\n ",
    " \n",
]
ANALYSIS_FIELDS = (
    "scalar",
    "empty",
    "multiline",
    "allow_flow_plain",
    "allow_block_plain",
    "allow_single_quoted",
    "allow_double_quoted",
    "allow_block",
)


def random_text(rng: random.Random, length: int, special: float) -> str:
    return "".join(rng.choice(SPECIAL) if rng.random() < special else rng.choice("ab c") for _ in range(length))


@pytest.mark.parametrize("seed", range(4))
def test_the_scalar_analysis_is_pyyamls(seed):
    ours, theirs = _SafeDumper(io.StringIO()), yaml.SafeDumper(io.StringIO())
    rng = random.Random(seed)
    for _ in range(20_000):
        text = random_text(rng, rng.choice([0, 1, 2, 3, 5, 12, 40]), 0.6)
        mine, reference = ours.analyze_scalar(text), theirs.analyze_scalar(text)
        assert [getattr(mine, f) for f in ANALYSIS_FIELDS] == [getattr(reference, f) for f in ANALYSIS_FIELDS], text


@pytest.mark.parametrize("seed", range(4))
def test_documents_are_written_as_safe_dump_writes_them(seed):
    rng = random.Random(seed)
    for _ in range(1_500):
        text = random_text(rng, rng.choice([1, 7, 60, 81, 82, 130, 400]), rng.choice([0.05, 0.3, 0.7]))
        document = {"data": {"script": text, text[:12] or "k": [text, {"deeper": [text]}]}, "kind": "ConfigMap"}
        assert dump_yaml(document) == yaml.safe_dump(document, sort_keys=True), text
        # Other emitter settings keep PyYAML's own methods or reach the same code: forced double quotes, narrow lines.
        for settings in ({"default_style": '"'}, {"width": 24}, {"indent": 4}, {"allow_unicode": True}):
            ours = yaml.dump(document, Dumper=_SafeDumper, sort_keys=True, **settings)
            assert ours == yaml.dump(document, Dumper=yaml.SafeDumper, sort_keys=True, **settings), (settings, text)


def test_every_rendered_object_is_written_as_safe_dump_writes_it(dev_synth, prod_synth):
    objects = [*rendered_objects(dev_synth), *rendered_objects(prod_synth)]
    assert len(objects) > 50
    for obj in objects:
        assert dump_yaml(obj) == yaml.safe_dump(obj, sort_keys=True), obj["metadata"]["name"]


def test_the_written_files_are_what_safe_dump_writes(dev_synth):
    files = sorted((dev_synth.outdir / "k8s").rglob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text()
        assert yaml.safe_dump(yaml.safe_load(text), sort_keys=True) == text, path.name
