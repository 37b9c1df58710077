"""Endpoint secrets (issue 25): API keys and Hugging Face tokens from Secrets Manager, as files through ASCP.

The start wrappers run for real in ``/bin/sh``; the key file they write is read by vLLM 0.12.0's own config-file
loader (extracted from the engine image's wheel); the IAM is evaluated on the synthesized prod template.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.secrets import (
    API_KEY_FILE,
    HF_TOKEN_FILE,
    SECRETS_DIR,
    SECRETS_STORE_DRIVER,
    EndpointSecrets,
)
from tests.shipped import load_shipped
from tests.synth import refused_by_app
from tests.test_serving_charts import (
    DEV,
    env_of,
    flag,
    render,
    router_deployment,
    two_endpoint_env,
    vllm,
)
from tests.upstream import require_upstream, vllm_source

DRIVER_CRD = (
    "kubernetes-sigs/secrets-store-csi-driver@v1.6.0:"
    "charts/secrets-store-csi-driver/crds/secrets-store.csi.x-k8s.io_secretproviderclasses.yaml"
)


@pytest.fixture(scope="module")
def env() -> Environment:
    return two_endpoint_env()


@pytest.fixture(scope="module")
def charts(env):
    return {name: render(env, name) for name in ("qwen2-7b", "llama-8b")}


def provider_class(objs: list[dict]) -> dict:
    found = [o for o in objs if o["kind"] == "SecretProviderClass"]
    assert len(found) == 1
    return found[0]


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def engine_pod(objs):
    return pod_spec(next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-engine")))


# ------------------------------------------------------------------------------------------------- rendered objects


def test_each_endpoint_mounts_only_its_own_provider_class_read_only(env, charts):
    for name, objs in charts.items():
        spc = provider_class(objs)
        assert spc["metadata"]["name"] == f"{name}-secrets"
        params = spc["spec"]["parameters"]
        assert params["usePodIdentity"] == "true" and params["region"] == env.region
        objects = {o["objectAlias"]: o["objectName"] for o in yaml.safe_load(params["objects"])}
        assert objects[API_KEY_FILE] == env.api_key_secret_name(name) == f"kvtiers/{env.name}/{name}/api-key"
        # The router and the engines check the keys.
        for pod in (pod_spec(router_deployment(objs)), engine_pod(objs)):
            csi = [v for v in pod["volumes"] if "csi" in v]
            assert [v["csi"] for v in csi] == [
                {
                    "driver": SECRETS_STORE_DRIVER,
                    "readOnly": True,
                    "volumeAttributes": {"secretProviderClass": spc["metadata"]["name"]},
                }
            ]
            mounts = [m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == csi[0]["name"]]
            assert mounts and all(m["readOnly"] and m["mountPath"] == SECRETS_DIR for m in mounts)


def test_the_hf_token_is_a_file_never_an_env_value(charts):
    hub = two_endpoint_env(source={"type": "huggingface", "token_secret": "kvtiers/hf-token"})
    objs = render(hub, "llama-8b")
    spc = provider_class(objs)
    objects = {o["objectAlias"]: o["objectName"] for o in yaml.safe_load(spc["spec"]["parameters"]["objects"])}
    assert objects[HF_TOKEN_FILE] == "kvtiers/hf-token"
    router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    assert env_of(router)["HF_TOKEN_PATH"]["value"] == f"{SECRETS_DIR}/{HF_TOKEN_FILE}"
    assert env_of(vllm(objs))["HF_TOKEN_PATH"]["value"] == f"{SECRETS_DIR}/{HF_TOKEN_FILE}"
    for rendered in (*charts.values(), objs):
        for container in (vllm(rendered), router_deployment(rendered)["spec"]["template"]["spec"]["containers"][0]):
            assert not {"HF_TOKEN", "VLLM_API_KEY"} & set(env_of(container))
            assert not any("secretKeyRef" in (e.get("valueFrom") or {}) for e in container.get("env", []))


def test_an_endpoint_without_api_key_renders_no_key_and_no_wrapper():
    raw = {**DEV, "serving": {**DEV["serving"], "endpoints": [{**DEV["serving"]["endpoints"][0], "api_key": False}]}}
    env = Environment.model_validate(raw)
    objs = render(env, "qwen2-7b")
    assert not [o for o in objs if o["kind"] == "SecretProviderClass"]
    router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    assert "--callbacks" not in router["args"] and "KVTIERS_API_KEY_FILE" not in env_of(router)
    engine = vllm(objs)
    assert "--middleware" not in engine["args"] and "KVTIERS_API_KEY_FILE" not in env_of(engine)


def test_operator_endpoints_refuse_api_key_true_naming_the_field(tmp_path):
    from kvtiers.constructs.operator_serving import check_client_authentication

    # The construct's rule, as a library user meets it and as the app reports it for the file.
    with pytest.raises(ValueError) as refused:
        check_client_authentication("OperatorServingEndpoint 'qwen2-7b'", api_key=True, client_cidrs=None)
    assert "api_key true is refused" in str(refused.value) and "InvokeEndpoint" in str(refused.value)
    operator = {**DEV["serving"]["endpoints"][0], "serving": "operator", "api_key": True}
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump({**DEV, "serving": {**DEV["serving"], "endpoints": [operator]}}))
    assert str(refused.value) in refused_by_app(path)


def test_secret_names_are_checked_where_the_props_are_built():
    with pytest.raises(ValueError, match="api_key_secret 'bad name'"):
        EndpointSecrets(region="us-east-1", api_key_secret="bad name")
    with pytest.raises(ValueError, match="give api_key_secret, hf_token_secret or both"):
        EndpointSecrets(region="us-east-1")


def test_the_provider_class_is_valid_against_the_drivers_crd(charts):
    """Schema of ``SecretProviderClass`` v1 as Secrets Store CSI driver v1.6.0 (the one ASCP 3.1.1 locks) installs it."""
    import jsonschema

    text = require_upstream(DRIVER_CRD)
    crd = yaml.safe_load(text)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = version["schema"]["openAPIV3Schema"]
    for objs in charts.values():
        jsonschema.validate(provider_class(objs), schema)
    # The schema is not vacuous: a parameter that is not a string is refused.
    bad = provider_class(charts["qwen2-7b"])
    bad = {**bad, "spec": {**bad["spec"], "parameters": {"usePodIdentity": True}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


# ------------------------------------------------------------------------------------------------- the router's check


def test_the_router_and_the_engines_load_the_key_check_and_no_spec_holds_a_key(charts, tmp_path):
    """With an API key the router loads ``kvtiers_api_auth`` from its ConfigMap (``--callbacks``), each engine loads
    the same file's ASGI check (``--middleware``), and both read the mounted key file; no command line or environment
    carries a key (vLLM logs its arguments at start)."""
    for objs in charts.values():
        router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
        module = flag(router["args"], "--callbacks").rpartition(".")[0]
        assert module == "kvtiers_api_auth"
        scripts = next(
            o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-router-kvtiers")
        )
        assert f"{module}.py" in scripts["data"]
        assert env_of(router)["KVTIERS_API_KEY_FILE"]["value"] == f"{SECRETS_DIR}/{API_KEY_FILE}"
        assert "command" not in router, "the image's own entrypoint"
        engine = vllm(objs)
        check_module, _, check_class = flag(engine["args"], "--middleware").rpartition(".")
        engine_config = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-lmcache"))
        assert engine_config["data"][f"{check_module}.py"] == scripts["data"][f"{module}.py"], "one check, one file"
        mounted = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
        assert env_of(engine)["PYTHONPATH"]["value"] == mounted["lmcache-config"]
        assert env_of(engine)["KVTIERS_API_KEY_FILE"]["value"] == f"{SECRETS_DIR}/{API_KEY_FILE}"
        shipped = load_shipped(check_module, engine_config["data"][f"{check_module}.py"], tmp_path)
        assert isinstance(getattr(shipped, check_class), type), "vLLM adds a class with app.add_middleware"
        for container in (router, engine):
            assert not {"--api-key", "--config"} & set(container.get("args", []))
            assert "VLLM_API_KEY" not in env_of(container)


def test_a_kvaware_router_loads_the_fallback_before_the_key_check():
    env = two_endpoint_env()
    objs = render(env, "llama-8b")
    router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    assert flag(router["args"], "--callbacks") == "kvtiers_api_auth.callbacks"
    assert env_of(router)["KVTIERS_ROUTER_MODULES"]["value"] == "kvtiers_kvaware_fallback"
    scripts = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-router-kvtiers"))
    assert {"kvtiers_api_auth.py", "kvtiers_kvaware_fallback.py"} <= set(scripts["data"])


def test_vllm_would_log_a_key_given_on_its_command_line():
    """Why no key is on an engine's command line: vLLM 0.12.0's API server logs every non-default argument at start."""
    utils = vllm_source("vllm/entrypoints/utils.py")
    assert 'logger.info("non-default args: %s", non_default_args)' in utils
    assert "log_non_default_args(args)" in vllm_source("vllm/entrypoints/openai/api_server.py")


def test_extra_args_cannot_replace_the_endpoints_keys(env):
    import cdk8s

    endpoint = next(e for e in env.serving.endpoints if e.name == "qwen2-7b")
    engine = model.engine(env, endpoint)
    import dataclasses

    from kvtiers.k8s_charts.serving import ServingChart

    for extra in (("--api-key", "x"), ("--api_key=x",)):
        with pytest.raises(
            ValueError, match="API keys come from Secrets Manager .* the router and the engines check them"
        ):
            ServingChart(
                cdk8s.App(),
                "x",
                name="qwen2-7b",
                namespace="serving",
                engine=dataclasses.replace(engine, extra_args=extra),
                router=model.router(env, endpoint),
                secrets=model.endpoint_secrets(env, endpoint),
            )


# ------------------------------------------------------------------------------------------------- huggingface_hub


ROUTER_VENV = Path(__file__).resolve().parent.parent / ".venv-router" / "bin" / "python"


def test_huggingface_hub_in_the_router_venv_reads_the_token_file(tmp_path):
    """``HF_TOKEN_PATH`` with the router's pinned huggingface_hub, read at each call (a rotated file is seen)."""
    if not ROUTER_VENV.exists():
        pytest.skip("no .venv-router (make test builds it)")
    token = tmp_path / HF_TOKEN_FILE
    token.write_text("hf_first\n")
    code = (
        "import pathlib, sys; from huggingface_hub import get_token; print(get_token()); "
        "pathlib.Path(sys.argv[1]).write_text('hf_second'); print(get_token())"
    )
    env = {"HF_TOKEN_PATH": str(token), "HF_HOME": str(tmp_path / "hf"), "PATH": os.environ["PATH"]}
    done = subprocess.run([str(ROUTER_VENV), "-c", code, str(token)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hf_first", "hf_second"]


# ------------------------------------------------------------------------------------------------- IAM (prod synth)


def _resources(template: dict, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _refs(value) -> set[str]:
    """Every logical ID ``value`` refers to (Ref, Fn::GetAtt)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if "Ref" in value:
            found.add(value["Ref"])
        if "Fn::GetAtt" in value:
            found.add(value["Fn::GetAtt"][0])
        for v in value.values():
            found |= _refs(v)
    elif isinstance(value, list):
        for v in value:
            found |= _refs(v)
    return found


def test_each_endpoints_role_reads_only_its_own_secrets(prod_synth, prod_env_objects):
    env, _ = prod_env_objects
    template = prod_synth.template_json(prod_synth.graph.workloads)
    secrets = {
        props["Properties"]["Name"]: logical
        for logical, props in _resources(template, "AWS::SecretsManager::Secret").items()
    }
    self_managed = [e for e in env.serving.endpoints if e.serving == "self_managed"]
    assert sorted(secrets) == sorted(env.api_key_secret_name(e.name) for e in self_managed)
    associations = _resources(template, "AWS::EKS::PodIdentityAssociation").values()
    policies = _resources(template, "AWS::IAM::Policy").values()
    for endpoint in self_managed:
        accounts = {names.router_name(endpoint.name), names.engine_service_account_name(endpoint.name)}
        roles = {
            next(iter(_refs(a["Properties"]["RoleArn"])))
            for a in associations
            if a["Properties"]["ServiceAccount"] in accounts
        }
        assert len(roles) == 2, f"{endpoint.name}: the router and the engines have a role each, got {roles}"
        for role in roles:
            _check_reads_only_own_secrets(endpoint.name, _statements(policies, role), secrets, env)


def _statements(policies, role: str) -> list[dict]:
    return [
        s
        for p in policies
        if role in _refs(p["Properties"].get("Roles", []))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _check_reads_only_own_secrets(endpoint: str, statements: list[dict], secrets: dict, env) -> None:
    reads = [s for s in statements if any(a.startswith("secretsmanager:") for a in _as_list(s["Action"]))]
    assert reads and all(s["Effect"] == "Allow" for s in reads)
    readable = set().union(*(_refs(s["Resource"]) for s in reads))
    own = secrets[env.api_key_secret_name(endpoint)]
    others = set(secrets.values()) - {own}
    assert own in readable and not readable & others, f"{endpoint} reads {readable}"
    assert not any(r == "*" for s in reads for r in _as_list(s["Resource"]))
    decrypt = [s for s in statements if "kms:Decrypt" in _as_list(s["Action"])]
    assert decrypt, endpoint
    for s in decrypt:
        assert s["Condition"]["StringEquals"]["kms:ViaService"] == {
            "Fn::Join": ["", ["secretsmanager.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]
        }
        context = s["Condition"]["StringLike"]["kms:EncryptionContext:SecretARN"]
        assert own in _refs(context) and not _refs(context) & others


def test_no_router_is_bound_to_its_engines_weights_role(prod_synth, prod_env_objects):
    """A router reads no weights: its service account's role is not the engines', and may read (kvaware over S3)
    the tokenizer files of the weights' prefix, never a weights shard."""
    env, _ = prod_env_objects
    template = prod_synth.template_json(prod_synth.graph.workloads)
    role_of = {
        a["Properties"]["ServiceAccount"]: next(iter(_refs(a["Properties"]["RoleArn"])))
        for a in _resources(template, "AWS::EKS::PodIdentityAssociation").values()
    }
    policies = _resources(template, "AWS::IAM::Policy").values()
    s3_endpoints = [e for e in env.serving.endpoints if e.serving == "self_managed" and e.source.type == "s3"]
    assert {e.routing for e in s3_endpoints} >= {"kvaware", "session"}, "prod has both router kinds over S3"
    for endpoint in s3_endpoints:
        router, engines = names.router_name(endpoint.name), names.engine_service_account_name(endpoint.name)
        assert role_of[router] != role_of[engines], f"{router} holds the engines' weights role"
        patterns = [
            _arn_pattern(r)
            for s in _statements(policies, role_of[router])
            if "s3:GetObject" in _as_list(s["Action"])
            for r in _as_list(s["Resource"])
        ]
        if endpoint.routing != "kvaware":
            assert not patterns, (router, patterns)
            continue
        base = f"arn:aws:s3:::{endpoint.source.bucket}/{endpoint.source.prefix}"
        assert any(fnmatch.fnmatchcase(f"{base}/tokenizer.json", p) for p in patterns), patterns
        for shard in ("model-00001-of-00030.safetensors", "model.safetensors.index.json", "original/consolidated.pth"):
            assert not any(fnmatch.fnmatchcase(f"{base}/{shard}", p) for p in patterns), (shard, patterns)


def _arn_pattern(value) -> str:
    """An ARN of the template as a glob: the partition resolved, the rest as written (``*`` wildcards)."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return {"AWS::Partition": "aws"}[value["Ref"]]
    separator, parts = value["Fn::Join"]
    return separator.join(_arn_pattern(p) for p in parts)


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_the_platform_pins_the_ascp_addon_with_rotation_and_tolerations(prod_synth, prod_env_objects):
    env, _ = prod_env_objects
    template = prod_synth.template_json(prod_synth.graph.platform)
    addons = {a["Properties"]["AddonName"]: a["Properties"] for a in _resources(template, "AWS::EKS::Addon").values()}
    addon = addons["aws-secrets-store-csi-driver-provider"]
    assert addon["AddonVersion"] == env.eks.addons.aws_secrets_store_csi_driver_provider
    import json

    config = json.loads(addon["ConfigurationValues"])
    assert config["secrets-store-csi-driver"] == {"enableSecretRotation": True, "rotationPollInterval": "120s"}
    assert config["tolerations"] == [{"operator": "Exists"}]
    assert "syncSecret" not in json.dumps(config)
    keys = _resources(template, "AWS::KMS::Alias")
    assert {k["Properties"]["AliasName"] for k in keys.values()} >= {env.serving_secrets_key_alias}


# ------------------------------------------------------------------------------------------------- kvaware tokenizer


TINY_TOKENIZER = """
import json, pathlib, sys
from tokenizers import Tokenizer, models, pre_tokenizers
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True)
tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "hello": 1, "kv": 2, "tiers": 3}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}))
(out / "special_tokens_map.json").write_text(json.dumps({"unk_token": "[UNK]"}))
(out / "config.json").write_text(json.dumps({"model_type": "llama"}))
(out / "model-00001-of-00001.safetensors").write_text("weights")
"""


def test_a_kvaware_router_with_s3_weights_loads_the_engines_tokenizer_offline(tmp_path):
    """The router's init container copies the S3 prefix's tokenizer files into the Hugging Face cache under the
    served model name; the router venv's transformers (4.57.6, as the router image resolves it) then resolves
    ``AutoTokenizer.from_pretrained(<model>)`` from that copy with ``HF_HUB_OFFLINE=1``, as production-stack does."""
    import fnmatch
    import shlex
    import shutil

    if not ROUTER_VENV.exists():
        pytest.skip("no .venv-router (make test builds it)")
    env = two_endpoint_env()
    objs = render(env, "llama-8b")  # kvaware, S3 weights
    pod = router_deployment(objs)["spec"]["template"]["spec"]
    router = pod["containers"][0]
    assert env_of(router)["HF_HUB_OFFLINE"]["value"] == "1"
    (init,) = pod["initContainers"]
    assert init["image"] == env.serving.images.model_sync_image
    assert {m["name"] for m in init["volumeMounts"]} <= {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    # The rendered script: sync (its filters) into the snapshot, then refs/main. The S3 copy is played by a local
    # directory, filtered as `aws s3 sync --exclude '*' --include ...` filters (the last matching filter wins).
    script = init["command"][2]
    sync, refs = script.split(" && ", 1)
    words = shlex.split(sync)
    assert words[:3] == ["aws", "s3", "sync"] and words[3] == "s3://kvtiers-models/llama/3.1-8b-instruct"
    snapshot = words[4]
    filters = [(words[i], words[i + 1]) for i in range(5, len(words) - 1) if words[i] in ("--exclude", "--include")]
    source = tmp_path / "s3"
    made = subprocess.run([str(ROUTER_VENV), "-c", TINY_TOKENIZER, str(source)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    home = tmp_path / "home"
    hf_home = env_of(router)["HF_HOME"]["value"]
    root = str(Path(hf_home).parent.parent)  # the router's HOME, an emptyDir
    local = lambda path: home / Path(path).relative_to(root)
    copied = []
    for f in source.iterdir():
        keep = True
        for kind, pattern in filters:
            if fnmatch.fnmatch(f.name, pattern):
                keep = kind == "--include"
        if keep:
            copied.append(f.name)
            local(snapshot).mkdir(parents=True, exist_ok=True)
            shutil.copy(f, local(snapshot) / f.name)
    assert "model-00001-of-00001.safetensors" not in copied and "tokenizer.json" in copied
    done = subprocess.run(["/bin/sh", "-c", refs.replace(root, str(home))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    code = (
        "import sys; from transformers import AutoTokenizer; "
        "print(AutoTokenizer.from_pretrained(sys.argv[1]).encode('hello kv tiers', add_special_tokens=False))"
    )
    variables = {"HF_HOME": str(local(hf_home)), "HF_HUB_OFFLINE": "1", "PATH": os.environ["PATH"]}
    loaded = subprocess.run(
        [str(ROUTER_VENV), "-c", code, "meta-llama/Llama-3.1-8B-Instruct"],
        capture_output=True,
        text=True,
        env=variables,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split("\n")[-2] == "[1, 2, 3]"


def test_bad_secret_settings_name_the_file_the_field_and_what_is_allowed(tmp_path):
    from kvtiers.config import ConfigError, load_environment

    raw = yaml.safe_load(yaml.safe_dump(DEV))
    raw["serving"]["endpoints"][0]["source"]["token_secret"] = "my token"
    raw["serving"]["endpoints"][0]["api_key"] = "maybe"
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        load_environment(path)
    message = str(error.value)
    assert str(path) in message
    assert "serving.endpoints.0.source.token_secret" in message and "A-Za-z0-9/_+=.@-" in message
    assert "serving.endpoints.0.api_key" in message and "boolean" in message


def test_a_kvaware_router_with_pinned_hub_weights_tokenizes_with_that_revision(tmp_path):
    """The router's init container (the router image's huggingface_hub) fetches the pinned revision's tokenizer and
    points the cache's ``refs/main`` at it; production-stack's ``from_pretrained(<model>)``, which asks for ``main``,
    then loads that revision offline. Played in the router venv with the revision already in the cache (no network
    here): the rendered script's download resolves it, and without its ``refs/main`` the router could not load it."""
    if not ROUTER_VENV.exists():
        pytest.skip("no .venv-router (make test builds it)")
    revision = "a" * 40
    env = two_endpoint_env(source={"type": "huggingface", "revision": revision, "token_secret": "kvtiers/hf-token"})
    pod = router_deployment(render(env, "llama-8b"))["spec"]["template"]["spec"]
    router = pod["containers"][0]
    assert env_of(router)["HF_HUB_OFFLINE"]["value"] == "1"
    (init,) = pod["initContainers"]
    assert init["image"] == env.serving.images.router_image
    # a gated model: the download reads the token file the router mounts
    assert env_of(init)["HF_TOKEN_PATH"]["value"] == f"{SECRETS_DIR}/{HF_TOKEN_FILE}"
    assert SECRETS_DIR in {m["mountPath"] for m in init["volumeMounts"]}
    python, flag_c, script, model, pinned, repo_dir, *patterns = init["command"]
    assert python.endswith("/python")
    assert (model, pinned) == ("meta-llama/Llama-3.1-8B-Instruct", revision)
    hf_home = env_of(router)["HF_HOME"]["value"]
    home = tmp_path / "hf"
    local_repo = home / Path(repo_dir).relative_to(hf_home)
    made = subprocess.run(
        [str(ROUTER_VENV), "-c", TINY_TOKENIZER, str(local_repo / "snapshots" / revision)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    variables = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "PATH": os.environ["PATH"]}
    code = (
        "import sys; from transformers import AutoTokenizer; "
        "print(AutoTokenizer.from_pretrained(sys.argv[1]).encode('hello kv tiers', add_special_tokens=False))"
    )
    before = subprocess.run([str(ROUTER_VENV), "-c", code, model], capture_output=True, text=True, env=variables)
    assert before.returncode != 0, "without refs/main the router cannot resolve the model offline"
    fetched = subprocess.run(
        [str(ROUTER_VENV), flag_c, script, model, pinned, str(local_repo), *patterns],
        capture_output=True,
        text=True,
        env=variables,
    )
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    loaded = subprocess.run([str(ROUTER_VENV), "-c", code, model], capture_output=True, text=True, env=variables)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split("\n")[-2] == "[1, 2, 3]"


SERVED_NAMES = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "noorg",
    "org/sub/name",
    "org--x/name",
    "my.model.",
    "Llama-3.1-8B-Instruct:fp8",
    "a" * 97,
    "org/" + "b" * 96,
    "org/name..",
    "org/name.git",
    "-lead/name",
    "org/name_",
    "",
]


def test_served_names_a_kvaware_router_can_look_up_are_what_huggingface_hub_accepts():
    """kvtiers' rule against huggingface_hub's own ``validate_repo_id`` (0.34.0, the router image's), name by name."""
    from kvtiers.checks import hub_repo_id_problem

    if not ROUTER_VENV.exists():
        pytest.skip("no .venv-router (make test builds it)")
    code = (
        "import json, sys\nfrom huggingface_hub.utils import HFValidationError, validate_repo_id\nok = []\n"
        "for name in json.loads(sys.argv[1]):\n    try:\n        validate_repo_id(name); ok.append(True)\n"
        "    except HFValidationError:\n        ok.append(False)\nprint(json.dumps(ok))"
    )
    import json

    done = subprocess.run([str(ROUTER_VENV), "-c", code, json.dumps(SERVED_NAMES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    accepted = dict(zip(SERVED_NAMES, json.loads(done.stdout), strict=True))
    assert accepted == {name: hub_repo_id_problem(name) is None for name in SERVED_NAMES}
    assert sum(accepted.values()) >= 3 and not all(accepted.values()), "both kinds are exercised"


def test_a_kvaware_endpoint_refuses_a_served_name_its_router_cannot_look_up(tmp_path):
    from kvtiers.k8s_charts.serving.router import HubTokenizerCopy

    raw = yaml.safe_load(yaml.safe_dump(DEV))
    endpoint = raw["serving"]["endpoints"][0]
    endpoint.update(
        routing="kvaware",
        api="completions",
        model="Llama-3.1-8B-Instruct:fp8",
        router_replicas=1,
        model_sizes={"layers": 28, "kv_heads": 4, "head_dim": 128, "parameters": 7.0e9},
    )
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    # The rule is the router chart's (it renders the router that looks the tokenizer up).
    message = refused_by_app(path)
    assert str(path) in message
    assert "'Llama-3.1-8B-Instruct:fp8'" in message and "huggingface_hub refuses it as a repository id" in message
    with pytest.raises(ValueError, match=r"HubTokenizerCopy: model 'org/sub/name' has more than one '/'"):
        HubTokenizerCopy(model="org/sub/name", revision="0" * 40, image="router:1")
