"""Operator path charts: IEC spec against the sagemaker-hyperpod 3.12.0 model, the Curvine policy, fingerprints."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import cdk8s
import pytest
import yaml

from kvtiers.config import load_environment
from kvtiers.k8s_charts.l2 import L2Settings
from kvtiers.k8s_charts.operator import (
    CurvineL2PolicyChart,
    CurvineL2PolicyProps,
    InferenceEndpointConfigChart,
    InferenceEndpointConfigProps,
    build_policy,
    build_spec,
    immutable_fingerprint,
)
from kvtiers.k8s_charts.operator.endpoint_config import replacements

ROOT = Path(__file__).resolve().parent.parent
SDK_MODULE = ROOT / ".venv-hyperpod-sdk" / "sagemaker" / "hyperpod" / "inference" / "config" / "hp_endpoint_config.py"
DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())


def _operator_env(tmp_path: Path, **operator):
    raw = copy.deepcopy(DEV)
    for ep in raw["serving"]["endpoints"]:
        ep["serving"] = "operator"
    second = copy.deepcopy(raw["serving"]["endpoints"][0])
    second.update(name="second-ep", l2="on")
    raw["serving"]["endpoints"].append(second)
    if operator:
        raw["inference_operator"] = operator
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_environment(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return _operator_env(tmp_path_factory.mktemp("op"))


@pytest.fixture(scope="module")
def hp_model():
    if not SDK_MODULE.exists():
        pytest.skip(
            "sagemaker-hyperpod 3.12.0 not installed: "
            ".venv/bin/pip install --no-deps --target .venv-hyperpod-sdk sagemaker-hyperpod==3.12.0"
        )
    spec = importlib.util.spec_from_file_location("kvtiers_hp_endpoint_config", SDK_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _specs(env):
    return [build_spec(InferenceEndpointConfigProps.from_environment(env, ep)) for ep in env.serving.endpoints]


def test_spec_validates_against_operator_model(env, hp_model):
    fields = set(hp_model._HPEndpoint.model_fields)
    for spec in _specs(env):
        hp_model._HPEndpoint.model_validate(spec)
        assert set(spec) <= fields, set(spec) - fields


def test_model_rejects_misspelled_nested_field(env, hp_model):
    spec = copy.deepcopy(_specs(env)[0])
    spec["kvCacheSpec"]["enableL3Cache"] = True
    with pytest.raises(Exception):
        hp_model._HPEndpoint.model_validate(spec)


def test_spec_contents(env):
    ep = env.serving.endpoints[0]
    spec = _specs(env)[0]
    sized = env.sizing.endpoint(ep.name)
    assert spec["instanceType"].startswith("ml.g6e.")
    assert spec["worker"]["image"] == env.serving.images.vllm_image
    assert spec["worker"]["resources"]["limits"]["nvidia.com/gpu"] == str(ep.tensor_parallel_size)
    assert spec["worker"]["modelInvocationPort"]["containerPort"] == 8000
    assert "--kv-transfer-config" in spec["worker"]["args"]
    assert spec["intelligentRoutingSpec"] == {"enabled": True, "routingStrategy": ep.routing}
    # curvine backend: the operator's own L2 stays off whatever the decision
    assert spec["kvCacheSpec"] == {"enableL1Cache": True, "enableL2Cache": False}
    assert sized.l2_enabled  # dev endpoint's decision is on (attached by the policy)


def test_tieredstorage_backend_follows_l2_decision(tmp_path):
    env = _operator_env(tmp_path, l2_backend="tieredstorage")  # dev has tiered storage enabled
    seen = set()
    for ep, spec in zip(env.serving.endpoints, _specs(env)):
        on = env.sizing.endpoint(ep.name).l2_enabled
        seen.add(on)
        assert spec["kvCacheSpec"]["enableL2Cache"] is on
        if on:
            assert spec["kvCacheSpec"]["l2CacheSpec"] == {"l2CacheBackend": "tieredstorage"}


def test_chart_synth_has_fingerprint_annotation(env):
    app = cdk8s.App()
    ep = env.serving.endpoints[0]
    chart = InferenceEndpointConfigChart(app, "iec", props=InferenceEndpointConfigProps.from_environment(env, ep))
    (obj,) = chart.to_json()
    assert obj["apiVersion"] == "inference.sagemaker.aws.amazon.com/v1"
    assert obj["kind"] == "InferenceEndpointConfig"
    assert obj["metadata"]["name"] == ep.name
    assert obj["metadata"]["annotations"]["kvtiers.io/immutable-fingerprint"] == immutable_fingerprint(obj["spec"])


def test_fingerprint_changes_only_with_immutable_fields(env):
    spec = _specs(env)[0]
    base = immutable_fingerprint(spec)
    scaled = copy.deepcopy(spec)
    scaled["replicas"] = 7
    assert immutable_fingerprint(scaled) == base
    rerouted = copy.deepcopy(spec)
    rerouted["intelligentRoutingSpec"]["routingStrategy"] = "session"
    env_changed = copy.deepcopy(spec)
    env_changed["worker"]["environmentVariables"].append({"name": "X", "value": "1"})
    assert immutable_fingerprint(rerouted) != base
    assert immutable_fingerprint(env_changed) != base
    assert replacements({"a": "new", "b": "same", "c": "x"}, {"a": "old", "b": "same"}) == ("a",)


def _policy(env, endpoint):
    return build_policy(
        CurvineL2PolicyProps(endpoint=endpoint, worker_image=env.serving.images.vllm_image, l2=L2Settings.from_environment(env))
    )


def _selects(policy, namespace, labels) -> bool:
    for rule in policy["spec"]["rules"]:
        for m in rule["match"]["any"]:
            res = m["resources"]
            if namespace in res["namespaces"] and all(labels.get(k) == v for k, v in res["selector"]["matchLabels"].items()):
                continue
            return False
    return True


def test_policy_selects_only_its_endpoint(env):
    ns = env.serving.namespace
    a, b = (e.name for e in env.serving.endpoints)
    policy = _policy(env, a)
    assert _selects(policy, ns, {"app": a})
    assert not _selects(policy, ns, {"app": b})
    assert not _selects(policy, "other", {"app": a})
    assert not _selects(_policy(env, b), ns, {"app": a})
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_policy_sets_exactly_l2_settings(env):
    l2 = L2Settings.from_environment(env)
    policy = _policy(env, env.serving.endpoints[0].name)
    patch = policy["spec"]["rules"][0]["mutate"]["patchStrategicMerge"]["spec"]
    (volume,) = patch["volumes"]
    (container,) = patch["containers"]
    assert volume["persistentVolumeClaim"]["claimName"] == l2.claim_name
    assert container["(image)"] == env.serving.images.vllm_image
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": l2.mount_path}]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "LMCACHE_REMOTE_URL": l2.remote_url,
        "LMCACHE_REMOTE_SERDE": l2.serde,
        "PYTHONHASHSEED": l2.hash_seed,
    }
    app = cdk8s.App()
    CurvineL2PolicyChart(app, "pol", props=CurvineL2PolicyProps(
        endpoint="x", worker_image="img", l2=l2))
    assert app.synth_yaml()
