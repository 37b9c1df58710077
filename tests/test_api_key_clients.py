"""``kvtiers bench`` and ``kvtiers verify`` against an endpoint with API keys, and the key checks themselves, over
real HTTP in the router venv (FastAPI and uvicorn): ``kvtiers_api_auth`` in front of a small streaming server as
production-stack calls the router's check, and in front of every route vLLM 0.12.0 declares as vLLM loads the
engines' check; keys from Secrets Manager (its ``GetSecretValue`` answers and errors)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import boto3
import httpx
import pytest
from typer.testing import CliRunner

from kvtiers.cli.api_key import ApiKeyError, read_api_key
from kvtiers.cli.main import app
from kvtiers.cli.verify import api_key, runner
from kvtiers.config import load_environment
from kvtiers.k8s_charts import kvtiers_api_auth
from kvtiers.k8s_charts.kvtiers_api_auth import ENGINE_OPEN_ROUTES, ROUTER_OPEN_ROUTES, KeyCheckMiddleware
from kvtiers.k8s_charts.secrets import API_AUTH_MODULE, ENGINE_KEY_CHECK
from kvtiers.k8s_charts.shipped import module_source
from tests.conftest import CONFIG_DIR, ROOT
from tests.fakes import secrets_manager
from tests.fakes.cluster import build_healthy
from tests.fakes.kube_server import FakeKube
from tests.upstream import vllm_routes, vllm_source
from tests.waiting import HANG_BOUND_SECONDS, until

KEYS = ["NewKey123", "OldKey456"]
ROUTER_PYTHON = ROOT / ".venv-router" / "bin" / "python"


@pytest.fixture(scope="module")
def key_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "api-key"
    path.write_text(" ".join(KEYS) + "\n")
    return path


def serve(script: str, ready_path: str, *args: str):
    """Run ``tests/fakes/<script> <port> <args>`` in the router venv on a free port until ``ready_path`` answers."""
    if not ROUTER_PYTHON.exists():
        pytest.skip("no .venv-router (make test builds it): FastAPI and uvicorn at the router's pins")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([str(ROUTER_PYTHON), str(Path(__file__).parent / "fakes" / script), str(port), *args])
    url = f"http://127.0.0.1:{port}"
    until(lambda: httpx.get(f"{url}{ready_path}", timeout=5), what=f"{script} answers", process=process)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(HANG_BOUND_SECONDS)


@pytest.fixture(scope="module")
def server(key_file):
    """The router's key check with :data:`KEYS` in its key file, serving over HTTP (``keyed_router_server.py``)."""
    yield from serve("keyed_router_server.py", "/seen", str(Path(kvtiers_api_auth.__file__)), str(key_file))


def seen(url: str) -> list[str | None]:
    """The ``Authorization`` headers that got through (``/seen`` is behind the key check too)."""
    return httpx.get(f"{url}/seen", headers={"Authorization": f"Bearer {KEYS[0]}"}).json()


def bench(*args):
    return CliRunner().invoke(
        app, ["bench", "--model", "test-model", "--timeout", "10", "--lengths", "20", "--repeats", "1", *args]
    )


def test_bench_without_a_key_says_the_endpoint_needs_one(server):
    result = bench("--url", server)
    assert result.exit_code == 1
    assert "HTTP 401 Unauthorized without an API key" in result.output and "--endpoint" in result.output


def test_bench_with_a_wrong_key_says_it_was_refused(server):
    result = bench("--url", server, "--api-key", "WrongKey")
    assert result.exit_code == 1
    assert "refused the API key sent" in result.output and "WrongKey" not in result.output


def test_bench_reads_the_endpoints_key_from_secrets_manager_and_sends_it(server, monkeypatch):
    env = load_environment(CONFIG_DIR / "dev.yaml")
    store = secrets_manager.FakeSecretsManager({env.api_key_secret_name("qwen2-7b"): " ".join(reversed(KEYS))})
    regions: list[str] = []

    class Session:
        def __init__(self, profile_name=None, region_name=None) -> None:
            regions.append(region_name)

        def client(self, service: str):
            assert service == "secretsmanager"
            return store

    monkeypatch.setattr(boto3, "Session", Session)
    before = len(seen(server))
    result = bench("--url", server, "-c", str(CONFIG_DIR / "dev.yaml"), "--endpoint", "qwen2-7b", "--json")
    assert result.exit_code == 0, result.output
    assert store.reads == [env.api_key_secret_name("qwen2-7b")] and regions == [env.region]
    # the first key of the secret (a rotation puts the new one first), accepted by vLLM's check
    sent = seen(server)[before:]
    assert sent and set(sent) == {"Bearer OldKey456"}


def test_read_api_key_names_the_secret_and_the_cause():
    store = secrets_manager.FakeSecretsManager({"empty": "  \n"}, denied=("denied",))
    for name, why in (
        ("missing", "ResourceNotFoundException"),
        ("denied", "AccessDeniedException"),
        ("empty", "holds no key"),
    ):
        with pytest.raises(ApiKeyError, match=why) as error:
            read_api_key(store, name)
        assert name in str(error.value)


# ------------------------------------------------------------------------------------------------- verify


@pytest.fixture
def keyed_world(dev_env, dev_objects):
    with FakeKube() as kube:
        kube.handles = build_healthy(kube, dev_env, dev_objects)
        yield kube


def endpoint(env):
    return next(e for e in env.serving.endpoints if e.name == "qwen2-7b")


def test_verify_passes_when_the_router_and_each_engine_answer_401_without_a_key(keyed_world, dev_env):
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert check.ok, check
    assert "router and its 2 Ready engine pod(s) (qwen2-7b-engine-0, qwen2-7b-engine-1" in check.detail
    assert "answer 401" in check.detail
    # each engine was asked directly, through the pod proxy (which strips any key)
    log = [path for _, path in keyed_world.log]
    for pod in ("qwen2-7b-engine-0", "qwen2-7b-engine-1"):
        assert f"/api/v1/namespaces/serving/pods/{pod}:8000/proxy/v1/chat/completions" in log


def test_verify_fails_when_the_router_and_its_engines_serve_without_the_key(keyed_world, dev_env):
    router = keyed_world.handles["routers"]["qwen2-7b"]
    assert router["keyed"], "the rendered router loads the key check"
    router["keyed"] = False
    for engine in keyed_world.handles["engines"].values():
        engine.key_check = None
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert not check.ok and "the router answered HTTP 200, not 401" in check.detail


def test_verify_fails_when_an_engine_serves_a_completion_without_a_key(keyed_world, dev_env):
    """A router that checks the key is not enough: a pod that reaches an engine past it must need the key too."""
    keyed_world.handles["engines"]["qwen2-7b-engine-1"].key_check = None
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert not check.ok
    assert "the router answers 401 without a key, but through the pod proxy (no key) 1 of 2" in check.detail
    assert "qwen2-7b-engine-1 HTTP 200" in check.detail and "qwen2-7b-engine-0" not in check.detail
    assert "--middleware kvtiers_api_auth.KeyCheckMiddleware" in check.hint


def test_verify_sends_each_key_to_each_router_and_engine_pod(keyed_world, dev_env):
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    routers = [f"qwen2-7b-router-{i}" for i in range(endpoint(dev_env).router_replicas)]
    pods = [*routers, "qwen2-7b-engine-0", "qwen2-7b-engine-1"]
    assert check.ok and f"each of {len(pods)} pod(s) refuses no key, takes each of the 2 key(s)" in check.detail
    forwarded = [path for _, path in keyed_world.log if path.endswith("/portforward?ports=8000")]
    # per pod: no key, then each of the two keys
    assert sorted(forwarded) == sorted(
        f"/api/v1/namespaces/serving/pods/{pod}/portforward?ports=8000" for pod in pods * 3
    )


def test_verify_fails_naming_a_pod_whose_key_file_is_older_than_the_secret(keyed_world, dev_env, tmp_path):
    """A refresh that failed leaves a pod with the old file: it refuses the key clients now send."""
    stale = tmp_path / "api-key"
    stale.write_text("old-qwen2-7b\n")
    keyed_world.handles["engines"]["qwen2-7b-engine-1"].key_check = KeyCheckMiddleware(None, key_file=str(stale))
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert not check.ok and "qwen2-7b-engine-1 /version key 1 of 2: HTTP 401, not 200" in check.detail
    assert "qwen2-7b-engine-0" not in check.detail.partition("current keys:")[2] and "delete it" in check.hint


def test_verify_fails_naming_a_router_pod_without_the_check(keyed_world, dev_env):
    """A router pod that does not load the check (one left from before it) answers its keyed route without a key;
    the Service's 401 came from another replica."""
    keyed_world.handles["router_checks"]["qwen2-7b-router-1"] = None
    check = api_key.check_api_key(
        secrets_manager.for_environment(dev_env), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert not check.ok and "qwen2-7b-router-1 /v1/models without a key: HTTP 200, not 401" in check.detail
    assert "qwen2-7b-router-0" not in check.detail


def test_verify_fails_naming_a_pod_that_still_takes_a_retired_key(keyed_world, dev_env, tmp_path):
    """After a rotation's last step the old key is in the secret's previous version only: every pod must refuse it."""
    name = dev_env.api_key_secret_name("qwen2-7b")
    store = secrets_manager.FakeSecretsManager({name: "new-qwen2-7b"}, previous={name: "new-qwen2-7b old-qwen2-7b"})
    current = tmp_path / "current"
    current.write_text("new-qwen2-7b\n")
    for pod, engine in keyed_world.handles["engines"].items():
        if pod != "qwen2-7b-engine-0":
            engine.key_check = KeyCheckMiddleware(None, key_file=str(current))
    for pod in list(keyed_world.handles["router_checks"]):
        keyed_world.handles["router_checks"][pod] = KeyCheckMiddleware(
            None, open_routes=ROUTER_OPEN_ROUTES, key_file=str(current)
        )
    check = api_key.check_api_key(store, keyed_world.api_client(), dev_env, endpoint(dev_env))
    assert not check.ok
    assert check.detail.count("retired key 1 of 1: HTTP 200, not 401") == 1 and "qwen2-7b-engine-0" in check.detail
    # once that engine has the current file too, the rotation is complete
    keyed_world.handles["engines"]["qwen2-7b-engine-0"].key_check = KeyCheckMiddleware(None, key_file=str(current))
    check = api_key.check_api_key(store, keyed_world.api_client(), dev_env, endpoint(dev_env))
    assert check.ok and "refuses the 1 retired one(s)" in check.detail


def test_verify_fails_naming_a_missing_secret(keyed_world, dev_env):
    check = api_key.check_api_key(
        secrets_manager.FakeSecretsManager({}), keyed_world.api_client(), dev_env, endpoint(dev_env)
    )
    assert not check.ok and dev_env.api_key_secret_name("qwen2-7b") in check.detail


def test_verify_runs_the_api_key_check_only_on_authenticated_endpoints(dev_env):
    steps = [(a, n) for a, n, _ in runner.steps(dev_env, runner.Clients(sagemaker=None, kube=None), False, 1, 1)]
    assert ("endpoint:qwen2-7b", api_key.NAME) in steps


# ------------------------------------------------------------------------------------------------- the router's check


def completion(url: str, header: str | None) -> int:
    headers = {"Authorization": header} if header is not None else {}
    return httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "a b"}, headers=headers).status_code


def test_the_router_refuses_what_vllm_would_and_takes_every_key_of_the_file(server):
    assert completion(server, None) == 401
    assert completion(server, "Bearer wrong") == 401
    assert completion(server, f"Basic {KEYS[0]}") == 401
    assert completion(server, f"bearer {KEYS[1]}") == 200  # the scheme is case-insensitive, as vLLM's
    assert completion(server, f"Bearer {KEYS[0]}") == 200


def test_a_rotated_key_file_is_read_without_a_restart(server, key_file):
    original = key_file.read_text()
    try:
        key_file.write_text("Rotated789\n")
        assert completion(server, "Bearer Rotated789") == 200
        assert completion(server, f"Bearer {KEYS[0]}") == 401
        key_file.write_text("")
        assert completion(server, "Bearer Rotated789") == 401, "an empty file refuses everything"
    finally:
        key_file.write_text(original)


def _rewrite_by_rename(path: Path, text: str) -> None:
    """What ASCP 3.1.1 does on every fetch, changed or not (``server/server.go`` ``writeFile``): a temporary file
    renamed over the old one, so a new inode."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def test_a_rewrite_with_the_same_keys_is_neither_logged_nor_taken_as_a_rotation(tmp_path, capsys):
    path = tmp_path / "api-key"
    path.write_text("KeyOne KeyTwo\n")
    keys = kvtiers_api_auth.KeyFile(str(path))
    assert keys.keys() == (b"KeyOne", b"KeyTwo")
    assert capsys.readouterr().err.count("2 key(s)") == 1
    for _ in range(3):  # three polls of an unchanged secret
        _rewrite_by_rename(path, "KeyOne KeyTwo\n")
        assert keys.keys() == (b"KeyOne", b"KeyTwo")
    assert capsys.readouterr().err == ""
    _rewrite_by_rename(path, "KeyThree KeyOne\n")
    assert keys.keys() == (b"KeyThree", b"KeyOne")
    assert capsys.readouterr().err.count("2 key(s)") == 1


# ------------------------------------------------------------------------------------------------- the engines' check


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


@pytest.fixture(scope="module")
def engine_key_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("engine-secrets") / "api-key"
    path.write_text(" ".join(KEYS) + "\n")
    return path


@pytest.fixture(scope="module")
def engine(engine_key_file, tmp_path_factory):
    """Every route vLLM 0.12.0 declares, behind the engines' key check as the engine ConfigMap ships it and vLLM's
    ``--middleware`` loads it (``keyed_engine_server.py``); the check reads :data:`KEYS` from its key file."""
    routes = sorted(vllm_routes())
    modules = tmp_path_factory.mktemp("engine-modules")
    (modules / f"{API_AUTH_MODULE}.py").write_text(module_source(API_AUTH_MODULE))
    routes_json = json.dumps(routes)
    yield from serve(
        "keyed_engine_server.py", "/health", str(modules), ENGINE_KEY_CHECK, str(engine_key_file), routes_json
    )


def call(url: str, method: str, path: str, header: str | None = None) -> int:
    headers = {"Authorization": header} if header is not None else {}
    return httpx.request(method.upper(), f"{url}{concrete(path)}", headers=headers, json={}).status_code


def test_an_engine_serves_without_a_key_only_what_the_router_probes_and_collector_ask_for(engine):
    """Each route vLLM 0.12.0 declares: without a key only :data:`ENGINE_OPEN_ROUTES` answer (none runs the model);
    ``/invocations``, ``/pooling``, ``/score``, ``/pause`` and every other route vLLM's own check leaves open are
    refused."""
    declared = {(method.upper(), path) for method, path in vllm_routes()}
    metrics = ("GET", "/metrics")  # a mount, not a route decorator
    assert ENGINE_OPEN_ROUTES - {metrics} <= declared, "each keyless route is one vLLM serves"
    open_without_key = {(method, path) for method, path in declared if call(engine, method, path) != 401}
    assert open_without_key == ENGINE_OPEN_ROUTES - {metrics}
    assert call(engine, *metrics) == 200, "the collector, the router's stats and the drain hook"
    for must_be_refused in ("/v1/completions", "/v1/chat/completions", "/invocations", "/pooling", "/pause"):
        assert ("POST", must_be_refused) in declared and call(engine, "post", must_be_refused) == 401
    assert call(engine, "post", "/health") == 401, "a keyless route is keyless for its method only"
    refused = [(m, p) for m, p in declared if call(engine, m, p, f"Bearer {KEYS[1]}") == 401]
    assert not refused, "with a key every route answers"
    assert call(engine, "post", "/v1/completions", "Bearer wrong") == 401
    assert call(engine, "post", "/v1/completions", f"Basic {KEYS[0]}") == 401
    two = [("Authorization", f"Bearer {KEYS[0]}"), ("Authorization", "Bearer junk")]
    assert httpx.post(f"{engine}/v1/completions", headers=two, json={}).status_code == 401, "one header, not two"


def test_an_engine_reads_a_rotated_key_file_without_a_restart(engine, engine_key_file):
    original = engine_key_file.read_text()
    try:
        engine_key_file.write_text("Rotated789\n")
        assert call(engine, "post", "/v1/completions", "Bearer Rotated789") == 200
        assert call(engine, "post", "/v1/completions", f"Bearer {KEYS[0]}") == 401
        engine_key_file.write_text("")
        assert call(engine, "post", "/v1/completions", "Bearer Rotated789") == 401, "an empty file refuses"
        assert call(engine, "get", "/health") == 200, "the probes still pass: the pod stays in its Service"
    finally:
        engine_key_file.write_text(original)


def test_vllm_adds_a_middleware_class_after_its_own_and_serve_takes_the_option():
    """What the engines' ``--middleware`` relies on in vLLM 0.12.0: ``build_app`` imports the path and adds a class
    with ``app.add_middleware`` (Starlette runs the last added first), after its own ``AuthenticationMiddleware``."""
    server = vllm_source("vllm/entrypoints/openai/api_server.py")
    own = server.index("app.add_middleware(AuthenticationMiddleware")
    loop = server.index("for middleware in args.middleware:")
    assert own < loop and "app.add_middleware(imported)" in server[loop : loop + 600]
    assert "middleware: list[str]" in vllm_source("vllm/entrypoints/openai/cli_args.py")
