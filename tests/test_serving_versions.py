"""Issue 12 rules that need no upstream code: the version matrix in the schema, kvaware's requirements (API,
token, heartbeats, one controller), the versioned L2 namespaces and the sizing fixes."""

from __future__ import annotations

import ast
import copy

import cdk8s
import pytest
import yaml
from pydantic import ValidationError

from kvtiers.catalog import versions
from kvtiers.catalog.versions import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE, ENGINE_IMAGES, engine_release
from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.l2 import L2Namespace
from kvtiers.k8s_charts.serving.endpoint import LMCACHE_CONFIG_KEY
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import CONFIG_DIR, ROOT

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
DIGEST = "sha256:" + "a" * 64


def env_with(endpoint: dict | None = None, images: dict | None = None, **first) -> Environment:
    raw = copy.deepcopy(DEV)
    raw["serving"]["endpoints"][0].update(first)
    if endpoint:
        raw["serving"]["endpoints"].append({**copy.deepcopy(raw["serving"]["endpoints"][0]), **endpoint})
    if images:
        raw["serving"]["images"] = images
    return Environment.model_validate(raw)


def error(**kwargs) -> str:
    with pytest.raises(ValidationError) as exc:
        env_with(**kwargs)
    return str(exc.value)


def render(env: Environment, name: str) -> list[dict]:
    return wiring.serving_chart(cdk8s.App(), name, env, name).to_json()


def kinds(objs, kind):
    return [o for o in objs if o["kind"] == kind]


# ----------------------------------------------------------------------------------------------- version matrix


def test_defaults_pair_engine_and_router_on_one_lmcache_release():
    images = env_with().serving.images
    assert images.vllm_image == DEFAULT_ENGINE_IMAGE and images.router_image == DEFAULT_ROUTER_IMAGE
    assert images.engine.lmcache == versions.ROUTER_IMAGES[images.router_image].lmcache == "0.3.11"
    assert images.engine.vllm == "0.12.0"


def test_image_outside_the_matrix_is_rejected_with_the_known_ones():
    message = error(images={"vllm_image": "lmcache/vllm-openai:v0.3.9"})
    assert "serving.images.vllm_image" in message and "not in the version matrix" in message
    assert all(known in message for known in ENGINE_IMAGES)
    # A router outside the matrix serves prefixaware; kvaware needs the reviewed release (the chart's rule, below).
    render(env_with(images={"router_image": "lmcache/lmstack-router:0.1.12"}), "qwen2-7b")


def test_digest_pins_are_accepted_and_keep_their_matrix_row():
    env = env_with(
        images={"vllm_image": f"{DEFAULT_ENGINE_IMAGE}@{DIGEST}", "router_image": f"{DEFAULT_ROUTER_IMAGE}@{DIGEST}"}
    )
    assert env.serving.images.engine == engine_release(DEFAULT_ENGINE_IMAGE)
    assert "not in the version matrix" in error(images={"vllm_image": "lmcache/vllm-openai@sha256:zz"})


def refused(env: Environment) -> str:
    """The chart's refusal (the rule is the chart's: the app's file maps onto its props)."""
    with pytest.raises(ValueError) as exc:
        render(env, "qwen2-7b")
    return str(exc.value)


def test_kvaware_rejects_engines_and_router_on_different_lmcache():
    old = {"vllm_image": "lmcache/vllm-openai:v0.3.7"}
    message = refused(env_with(routing="kvaware", api="completions", l2="off", images=old))
    assert "one LMCache release" in message and "LMCache 0.3.7" in message and "LMCache 0.3.11" in message
    # without kvaware no controller protocol is spoken, so the pair is allowed (without the L2: see below)
    render(env_with(l2="off", images=old), "qwen2-7b")


def test_an_endpoint_with_the_l2_needs_the_lmcache_the_l2_guard_is_tested_with():
    message = refused(env_with(images={"vllm_image": "lmcache/vllm-openai:v0.3.7"}))
    assert "ServingChart 'qwen2-7b'" in message and "L2 guard" in message
    assert "LMCache 0.3.7" in message and "LMCache 0.3.11" in message


# ----------------------------------------------------------------------------------------------- kvaware


def test_kvaware_needs_the_router_release_the_fallback_is_reviewed_against(monkeypatch):
    newer = "lmcache/lmstack-router:v0.1.13"
    release = versions.ROUTER_IMAGES[DEFAULT_ROUTER_IMAGE]
    monkeypatch.setitem(
        versions.ROUTER_IMAGES, newer, versions.RouterRelease("vllm-stack-0.1.13", release.lmcache, release.vllm, "")
    )
    images = {"vllm_image": DEFAULT_ENGINE_IMAGE, "router_image": newer}
    render(env_with(images=images), "qwen2-7b")  # prefixaware
    message = refused(env_with(images=images, routing="kvaware", api="completions"))
    assert "router image lmcache/lmstack-router:v0.1.13 is vllm-stack-0.1.13" in message
    assert "needs a router of vllm-stack-0.1.12" in message
    # The module (which imports the router, so it is read here, not imported) says the same release.
    module = ast.parse((ROOT / "kvtiers" / "k8s_charts" / "kvtiers_kvaware_fallback.py").read_text())
    supported = next(
        n.value.value
        for n in module.body
        if isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["SUPPORTED_ROUTER"]
    )
    assert supported == versions.KVAWARE_FALLBACK_ROUTER == release.production_stack


def test_kvaware_with_chat_is_rejected_with_the_reason():
    message = error(routing="kvaware")
    assert "serving.endpoints.0" in message and "needs api: completions" in message and "'prompt'" in message
    operator = error(routing="kvaware", serving="operator", api="chat")
    assert "needs api: completions" in operator


def test_kvaware_on_a_gated_model_needs_a_token():
    # The rule is the chart's (it renders the router that loads the tokenizer).
    message = refused(
        env_with(
            routing="kvaware",
            api="completions",
            model="meta-llama/Llama-3.1-8B-Instruct",
            source={"type": "huggingface"},
        )
    )
    assert "gated model" in message and "hf_token_secret" in message
    # With S3 weights the router copies the engines' tokenizer from S3: no Hub token.
    s3 = {"type": "s3", "bucket": "models-bucket", "prefix": "llama"}
    render(
        env_with(routing="kvaware", api="completions", model="meta-llama/Llama-3.1-8B-Instruct", source=s3), "qwen2-7b"
    )
    assert "hf_token_secret" in error(
        routing="kvaware",
        api="completions",
        model="meta-llama/Llama-3.1-8B-Instruct",
        source={**s3, "hf_token_secret": "hf"},
    )


def test_operator_invocation_endpoint_follows_the_declared_api():
    raw = copy.deepcopy(yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text()))
    for api, path in (("chat", "v1/chat/completions"), ("completions", "v1/completions")):
        raw["serving"]["endpoints"][2]["api"] = api
        env = Environment.model_validate(raw)
        assert model.operator_endpoint(env, "qwen2-7b-chat").spec()["invocationEndpoint"] == path


def test_kvaware_heartbeats_match_the_router_worker_timeout_and_its_one_router_rolls_without_a_gap():
    env = env_with(routing="kvaware", api="completions")
    objs = render(env, "qwen2-7b")
    config = yaml.safe_load(kinds(objs, "ConfigMap")[0]["data"][LMCACHE_CONFIG_KEY])
    router = next(d for d in kinds(objs, "Deployment") if d["metadata"]["name"].endswith("-router"))
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    timeout = int(args[args.index("--lmcache-worker-timeout") + 1])
    beat, delay = config["lmcache_worker_heartbeat_time"], config["lmcache_worker_heartbeat_delay_time"]
    assert beat > 0 and delay + 2 * beat < timeout <= 60
    assert router["spec"]["replicas"] == 1
    # The replacement is Ready before the old router stops (engines move to it when the old one's connections close).
    assert router["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    probe = router["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["timeoutSeconds"] >= 5 and probe["periodSeconds"] * probe["failureThreshold"] >= 30
    # prefixaware has no controller: no heartbeat keys, two routers
    plain = render(env_with(), "qwen2-7b")
    plain_router = next(d for d in kinds(plain, "Deployment") if d["metadata"]["name"].endswith("-router"))
    assert plain_router["spec"]["replicas"] == 2 and plain_router["spec"]["strategy"] == router["spec"]["strategy"]
    assert "lmcache_worker_heartbeat_time" not in yaml.safe_load(
        kinds(plain, "ConfigMap")[0]["data"][LMCACHE_CONFIG_KEY]
    )


def test_partial_chunks_are_not_stored():
    config = yaml.safe_load(kinds(render(env_with(), "qwen2-7b"), "ConfigMap")[0]["data"][LMCACHE_CONFIG_KEY])
    assert config["save_unfull_chunk"] is False


# ----------------------------------------------------------------------------------------------- L2 namespaces


def namespace(env: Environment, name: str) -> L2Namespace:
    return model.l2_namespace(env, model.endpoint(env, name))


def test_endpoints_with_the_same_fingerprint_share_one_directory_only_when_asked():
    def urls(env: Environment) -> set[str]:
        return {
            yaml.safe_load(kinds(render(env, n), "ConfigMap")[0]["data"][LMCACHE_CONFIG_KEY])["remote_url"]
            for n in ("qwen2-7b", "qwen-b")
        }

    apart = env_with(endpoint={"name": "qwen-b", "routing": "roundrobin"})
    assert namespace(apart, "qwen2-7b") == namespace(apart, "qwen-b")
    assert len(urls(apart)) == 2, "each endpoint reads and writes only its own directory unless it asks to share"
    shared = env_with(
        endpoint={"name": "qwen-b", "routing": "roundrobin", "l2_share_group": "qwen"}, l2_share_group="qwen"
    )
    assert len(urls(shared)) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"source": {"type": "huggingface", "revision": "a" * 40}},
        {"dtype": "float16"},
        {"tensor_parallel_size": 2, "l1_gib": 20},
        {"model": "Qwen/Qwen2.5-32B-Instruct", "tensor_parallel_size": 2, "l1_gib": 20},
        {"source": {"type": "s3", "bucket": "weights-a", "prefix": "qwen2-7b"}},
    ],
)
def test_anything_that_changes_the_kv_bytes_changes_the_namespace(change):
    env = env_with(endpoint={"name": "other", **change})
    assert namespace(env, "qwen2-7b").directory != namespace(env, "other").directory


def test_new_weights_under_another_s3_location_never_read_the_old_weights_kv():
    """Unpinned S3 weights keep the revision ``unpinned``: moving the endpoint to another bucket or prefix (new weights
    under the same model name) must still move it to a new L2 directory, or it would load the old weights' KV."""
    s3 = {"type": "s3", "bucket": "weights-a", "prefix": "qwen2-7b"}
    before = namespace(env_with(source=s3), "qwen2-7b")
    for moved in ({**s3, "prefix": "qwen2-7b-finetuned"}, {**s3, "bucket": "weights-b"}):
        after = namespace(env_with(source=moved), "qwen2-7b")
        assert before.revision == after.revision == "unpinned"
        assert after.directory != before.directory, moved


def test_lmcache_version_serde_and_seed_are_in_the_namespace():
    base = namespace(env_with(), "qwen2-7b")
    # (an engine without the L2 guarded LMCache may not use the L2: the namespace is computed all the same)
    older = namespace(env_with(l2="off", images={"vllm_image": "lmcache/vllm-openai:v0.3.7"}), "qwen2-7b")
    assert base.lmcache_version == "0.3.11" and older.lmcache_version == "0.3.7"
    assert base.fingerprint != older.fingerprint
    raw = copy.deepcopy(DEV)
    raw["serving"]["hash_seed"] = "7"
    assert namespace(Environment.model_validate(raw), "qwen2-7b").fingerprint != base.fingerprint
    assert base.serde == "naive" and base.chunk_size == 256


# ----------------------------------------------------------------------------------------------- sizing


def test_l0_uses_the_usable_memory_of_an_l40s():
    sized = model.sizing(env_with()).endpoint("qwen2-7b")
    # Qwen2-7B bf16 at 0.9: (44.5 x 0.9 - 2) GiB - weights, 57,344 B per token
    expected = int(((44.5 * 0.9 - 2) * 1024**3 - sized.weight_bytes) // 57344)
    assert sized.l0_tokens == expected


def test_vllm_host_memory_grows_with_tensor_parallelism():
    one = model.sizing(env_with(l1_gib=20)).endpoint("qwen2-7b")
    two = model.sizing(env_with(l1_gib=20, tensor_parallel_size=2)).endpoint("qwen2-7b")
    assert two.vllm_host_gib > one.vllm_host_gib
    assert two.pod_memory_gib - one.pod_memory_gib == 20 + (two.vllm_host_gib - one.vllm_host_gib)


def test_model_dir_is_size_limited_and_s3_sync_skips_original_checkpoints():
    env = env_with(source={"type": "s3", "bucket": "models-bucket", "prefix": "qwen"})
    pod = next(d for d in kinds(render(env, "qwen2-7b"), "Deployment") if d["metadata"]["name"].endswith("-engine"))
    spec = pod["spec"]["template"]["spec"]
    models = next(v for v in spec["volumes"] if v["name"] == "models")
    sized = model.sizing(env).endpoint("qwen2-7b")
    assert models["emptyDir"]["sizeLimit"] == f"{sized.model_disk_gib}Gi"
    assert sized.weight_bytes / 1024**3 < sized.model_disk_gib < 2 * sized.weight_bytes / 1024**3
    command = spec["initContainers"][0]["command"]
    assert command[command.index("--exclude") + 1] == "original/*"
