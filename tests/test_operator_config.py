"""Operator-path configuration rejected through load_environment on temporary YAML."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kvtiers.config import ConfigError, load_environment
from kvtiers.k8s_charts.operator import InferenceEndpointConfigProps, build_spec

ROOT = Path(__file__).resolve().parent.parent
DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())


def _write(tmp_path: Path, change) -> Path:
    raw = copy.deepcopy(DEV)
    for ep in raw["serving"]["endpoints"]:
        ep["serving"] = "operator"
    change(raw)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rejected(tmp_path: Path, change) -> str:
    with pytest.raises(ConfigError) as info:
        load_environment(_write(tmp_path, change))
    return str(info.value)


def test_tieredstorage_backend_needs_tiered_storage(tmp_path):
    def change(raw):
        raw["inference_operator"] = {"l2_backend": "tieredstorage"}
        raw["hyperpod"]["tiered_storage"]["enabled"] = False

    assert "tiered_storage" in rejected(tmp_path, change)


def test_routing_outside_the_four(tmp_path):
    message = rejected(tmp_path, lambda raw: raw["serving"]["endpoints"][0].update(routing="leastload"))
    assert "routing" in message


def test_instance_group_not_in_hyperpod(tmp_path):
    message = rejected(tmp_path, lambda raw: raw["serving"]["endpoints"][0].update(instance_group="p5-nope"))
    assert "instance_group" in message


def test_bad_l2_backend(tmp_path):
    assert "l2_backend" in rejected(tmp_path, lambda raw: raw.update(inference_operator={"l2_backend": "redis"}))


def test_non_g6e_instance_type_refused_by_chart(tmp_path):
    env = load_environment(_write(tmp_path, lambda raw: None))
    props = InferenceEndpointConfigProps.from_environment(env, env.serving.endpoints[0])
    import dataclasses

    with pytest.raises(ValueError, match="ml.g6e"):
        build_spec(dataclasses.replace(props, instance_type="ml.p5.48xlarge"))
