"""``kvtiers plan``: tables and JSON from the environment's sizing, overrides, errors, help."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvtiers.cli.main import app
from kvtiers.config import model
from tests.conftest import CONFIG_DIR

runner = CliRunner()
DEV = str(CONFIG_DIR / "dev.yaml")


def invoke(*args):
    return runner.invoke(app, list(args))


def test_plan_table_shows_the_sizing(dev_env):
    result = invoke("plan", "-c", DEV)
    assert result.exit_code == 0, result.output
    sized = model.sizing(dev_env).endpoints[0]
    assert "57,344 B" in result.output
    assert f"{sized.l0_tokens:,} tokens" in result.output
    assert f"{sized.l1_tokens:,} tokens" in result.output
    assert f"{model.sizing(dev_env).l2_tokens(sized.name):,} tokens" in result.output
    assert "the fullest node of each HyperPod group" in result.output
    # Six of the two nodes' eight GPUs idle, at the ml.g6e.12xlarge price per node: $13.12 x 6 / 4.
    assert "6 of 8" in result.output and "($19.68/h)" in result.output
    assert "on - auto: expected prompt 2500 >= threshold 1000" in result.output


def test_plan_json_reuses_sizing_numbers(dev_env):
    result = invoke("plan", "-c", DEV, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    [endpoint] = data["endpoints"]
    sized = model.sizing(dev_env).endpoint("qwen2-7b")
    assert endpoint["name"] == "qwen2-7b"
    assert endpoint["model"] == "Qwen/Qwen2-7B-Instruct"
    assert endpoint["kv_bytes_per_token"] == 57_344 == sized.kv_bytes_per_token
    assert endpoint["l0_tokens"] == sized.l0_tokens
    assert endpoint["l1_tokens"] == sized.l1_tokens
    assert endpoint["l2_tokens"] == model.sizing(dev_env).l2_tokens("qwen2-7b")
    assert endpoint["l2_enabled"] is True
    [group] = data["groups"]
    assert (group["group"], group["count"], group["threads_per_core"]) == ("g6e-serving", 2, 2)
    # An ml.g6e.12xlarge's allocatable as Karpenter lists it (47810m, 360157Mi), less dev's 20 % tiered storage and
    # the 2 GiB system reserve.
    assert group["resources"]["cpu"]["offered"] == 47810
    assert group["resources"]["memory"]["offered"] == 360157 - 393216 * 20 // 100 - 2048
    # Both engines may share a node (a rollout): 2 x 8 CPUs, beside Curvine's worker (4), CSI node (2.7) and master (2)
    # and the node agents.
    assert group["resources"]["cpu"]["asked"] > 2 * 8000 + 8700
    assert group["gpus_idle"] == 6 and group["idle_usd_per_hour"] == 19.68
    assert data["problems"] == []


def test_hf_config_override_resizes_through_the_schema(tmp_path):
    cfg = tmp_path / "config.json"
    # Llama-3.1-8B shape: 32 layers, 8 KV heads, head dim 4096/32 = 128 -> 131,072 B per token in bf16.
    cfg.write_text(
        json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096})
    )
    result = invoke("plan", "-c", DEV, "--json", "--hf-config", f"qwen2-7b={cfg}")
    assert result.exit_code == 0, result.output
    endpoint = json.loads(result.output)["endpoints"][0]
    assert endpoint["kv_bytes_per_token"] == 131_072
    # the model id works as NAME too
    result = invoke("plan", "-c", DEV, "--json", "--hf-config", f"Qwen/Qwen2-7B-Instruct={cfg}")
    assert json.loads(result.output)["endpoints"][0]["kv_bytes_per_token"] == 131_072


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no-equals-sign", "expected NAME=PATH"),
        ("unknown=/x/config.json", "no endpoint or model of that name"),
        ("qwen2-7b=/nonexistent/config.json", "no such file"),
    ],
)
def test_bad_hf_config(value, message):
    result = invoke("plan", "-c", DEV, "--hf-config", value)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_hf_config_missing_keys(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 1}))
    result = invoke("plan", "-c", DEV, "--hf-config", f"qwen2-7b={cfg}")
    assert result.exit_code == 2 and "not a usable Hugging Face config.json" in result.output


def test_missing_config_file():
    result = invoke("plan", "-c", "does/not/exist.yaml")
    assert result.exit_code == 2
    assert "no such environment file" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_invalid_config_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIG_DIR / "dev.yaml").read_text().replace("count: 2", "count: two"))
    result = invoke("plan", "-c", str(bad))
    assert result.exit_code == 2
    assert "hyperpod.instance_groups.0.count" in result.output
    assert "Traceback" not in result.output
    # A value of the right type that the constructs refuse: their message, as a library user gets it.
    bad.write_text((CONFIG_DIR / "dev.yaml").read_text().replace("count: 2", "count: 0"))
    result = invoke("plan", "-c", str(bad))
    assert result.exit_code == 2
    assert "CurvineCluster: worker_nodes must be at least 1, got 0" in result.output
    assert "Traceback" not in result.output


def test_not_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed")
    result = invoke("plan", "-c", str(bad), "--json")
    assert result.exit_code == 2 and "not valid YAML" in result.output


@pytest.mark.parametrize("command", [[], ["plan"], ["verify"], ["bench"]])
def test_help(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "--help" in result.output
    if command:
        assert "--json" in result.output


def test_plan_shows_each_endpoints_l2_namespace(dev_env):
    from kvtiers.config.model import l2_namespace

    namespace = l2_namespace(dev_env, dev_env.serving.endpoints[0])
    data = json.loads(invoke("plan", "-c", DEV, "--json").output)
    assert data["endpoints"][0]["l2_namespace"] == f"endpoint-qwen2-7b/{namespace.directory}"
    result = invoke("plan", "-c", DEV)
    assert "L2 namespace" in result.output and "qwen-qwen2-7b" in result.output


def test_plan_shows_what_does_not_fit_and_exits_1(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIG_DIR / "dev.yaml").read_text().replace("      tensor_parallel_size: 1", "      l1_gib: 150"))
    result = invoke("plan", "-c", str(bad))
    assert result.exit_code == 1
    assert "the fullest node of each HyperPod group" in result.output
    assert "does not fit: instance group 'g6e-serving' (2 x ml.g6e.12xlarge, threads_per_core 2): memory:" in " ".join(
        result.output.split()
    )
    assert "Traceback" not in result.output
