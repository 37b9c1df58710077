"""Serving settings that cannot be built are rejected when the environment file loads, naming the field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kvtiers.config import load_environment, model
from tests.conftest import CONFIG_DIR
from tests.synth import refused_by_app

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def rejected(tmp_path: Path, change) -> str:
    raw = copy.deepcopy(DEV)
    change(raw["serving"]["endpoints"], raw)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return refused_by_app(path)


def refused_by_the_constructs(tmp_path: Path, change) -> str:
    """What the app says when the file parses but the constructs it maps onto refuse it."""
    raw = copy.deepcopy(DEV)
    change(raw["serving"]["endpoints"], raw)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return refused_by_app(path)


def test_unknown_routing_strategy(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(routing="fancy"))
    assert "serving.endpoints.0.routing" in message
    assert "'prefixaware', 'kvaware', 'session' or 'roundrobin'" in message and "'fancy'" in message


def test_model_not_in_the_table_without_model_sizes(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(model="acme/unknown-13b"))
    assert "Engine: model_shape is required for 'acme/unknown-13b'" in message


def test_model_not_in_the_table_with_model_sizes_loads(tmp_path):
    raw = copy.deepcopy(DEV)
    raw["serving"]["endpoints"][0].update(
        model="acme/unknown-7b", model_sizes={"layers": 28, "kv_heads": 4, "head_dim": 128, "parameters": 7.0e9}
    )
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert model.sizing(load_environment(path)).endpoint("qwen2-7b").kv_bytes_per_token == 57344


def test_duplicate_endpoint_names(tmp_path):
    message = refused_by_the_constructs(tmp_path, lambda eps, raw: eps.append(copy.deepcopy(eps[0])))
    assert "another endpoint of this app is named 'qwen2-7b' in namespace 'serving'" in message


def test_session_routing_needs_a_session_key(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(routing="session"))
    assert "Router: session_key is required when routing is 'session'" in message


def test_unknown_endpoint_key(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(l1_size=4))
    assert "serving.endpoints.0.l1_size: unknown key" in message


def test_an_l2_endpoint_without_a_pinned_revision_is_reported(tmp_path, dev_env):
    from kvtiers.config.report import l2_revision_report

    assert l2_revision_report(dev_env) == ()
    raw = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    del raw["serving"]["endpoints"][0]["source"]["revision"]
    unpinned = tmp_path / "unpinned.yaml"
    unpinned.write_text(yaml.safe_dump(raw))
    (line,) = l2_revision_report(load_environment(unpinned))
    assert line.startswith("qwen2-7b: L2 on but source.revision is not pinned")


def _two_endpoints(eps: list, group_a: str | None, group_b: str | None, **b_changes) -> None:
    second = {**copy.deepcopy(eps[0]), "name": "qwen2-7b-b", **b_changes}
    if group_a is not None:
        eps[0]["l2_share_group"] = group_a
    if group_b is not None:
        second["l2_share_group"] = group_b
    eps.append(second)


def _loaded(tmp_path: Path, change):
    raw = copy.deepcopy(DEV)
    change(raw["serving"]["endpoints"], raw)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_environment(path)


def test_endpoints_of_one_model_get_their_own_l2_directories_unless_they_share_explicitly(tmp_path):
    from kvtiers.config.model import l2_mount

    env = _loaded(tmp_path, lambda eps, raw: _two_endpoints(eps, None, None))
    a, b = (l2_mount(env, e) for e in env.serving.endpoints)
    assert a.sub_path != b.sub_path and not b.sub_path.startswith(a.sub_path.split("/")[0] + "/")
    env = _loaded(tmp_path, lambda eps, raw: _two_endpoints(eps, "qwen", "qwen"))
    a, b = (l2_mount(env, e) for e in env.serving.endpoints)
    assert a == b


def test_a_share_group_of_different_l2_namespaces_is_refused(tmp_path):
    message = refused_by_the_constructs(tmp_path, lambda eps, raw: _two_endpoints(eps, "qwen", "qwen", dtype="float16"))
    assert "l2_share_group 'qwen': 'qwen2-7b' and 'qwen2-7b-b' differ in dtype" in message


def test_a_share_group_of_different_weights_under_one_model_name_is_refused(tmp_path):
    def s3(bucket: str) -> dict:
        return {"type": "s3", "bucket": bucket, "prefix": "qwen2-7b"}

    def change(eps, raw):
        eps[0]["source"] = s3("weights-a")
        _two_endpoints(eps, "qwen", "qwen", source=s3("weights-b"))

    message = refused_by_the_constructs(tmp_path, change)
    assert "l2_share_group 'qwen': 'qwen2-7b' and 'qwen2-7b-b' differ in weights" in message


def test_a_share_group_name_must_be_a_dns_label(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(l2_share_group="Not_A_Label"))
    assert "serving.endpoints.0.l2_share_group" in message


def test_allowed_clients_must_be_cidrs(tmp_path):
    message = rejected(tmp_path, lambda eps, raw: eps[0].update(allowed_clients=["10.0.0.0/33"]))
    assert "Router: client_cidrs '10.0.0.0/33' is not an IPv4 CIDR" in message


def test_allowed_clients_are_refused_for_an_operator_endpoint(tmp_path):
    from kvtiers.constructs.operator_serving import check_client_authentication

    message = rejected(tmp_path, lambda eps, raw: eps[0].update(serving="operator", allowed_clients=["10.192.0.0/16"]))
    with pytest.raises(ValueError) as refused:
        check_client_authentication("OperatorServingEndpoint 'qwen2-7b'", api_key=False, client_cidrs=["10.0.0.0/8"])
    # The construct's refusal, as the app reports it: the operator's load balancer has no source list kvtiers sets.
    assert str(refused.value) in message and "allowed_clients" in message


def test_allowed_clients_default_to_the_vpc(dev_env):
    from kvtiers.config.model import allowed_clients

    assert allowed_clients(dev_env, dev_env.serving.endpoints[0]) == (dev_env.network.cidr,)


def test_a_copy_with_other_settings_is_sized_anew(dev_env):
    """The sizing is computed once per environment; a copy (pydantic shares its private state) gets its own."""
    first = model.sizing(dev_env).endpoint("qwen2-7b")
    endpoints = tuple(e.model_copy(update={"l1_gib": e.l1_gib * 2, "l2": "off"}) for e in dev_env.serving.endpoints)
    copy_ = dev_env.model_copy(update={"serving": dev_env.serving.model_copy(update={"endpoints": endpoints})})
    second = model.sizing(copy_).endpoint("qwen2-7b")
    assert second.l1_bytes == 2 * first.l1_bytes and not second.l2_enabled
    assert model.sizing(dev_env).endpoint("qwen2-7b") == first
