"""The router's key check in production-stack's router itself (``vllm-stack-0.1.12``, run from source as the router
rollout drill runs it): every route answers 401 without a key, the multipart and sleep routes that production-stack
proxies without calling ``pre_request`` included, and nothing of such a request reaches the engine.

The router runs with static discovery and ``roundrobin`` (the routing with which production-stack proxies multipart
requests), ``--callbacks kvtiers_api_auth.callbacks`` from the module the router ConfigMap ships, and one fake vLLM
that records what reaches it.
"""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.kvtiers_api_auth import ROUTER_OPEN_ROUTES
from kvtiers.k8s_charts.secrets import API_AUTH_MODULE
from kvtiers.k8s_charts.serving.router import PREVIOUS_API_AUTH_MODULE
from kvtiers.k8s_charts.shipped import module_source
from tests.fakes.openai_server import FakeOpenAI
from tests.test_engine_drain import free_port
from tests.test_router_rollout import ROUTER_VENV, STUBS, _router_source_available, router_source  # noqa: F401
from tests.test_serving_charts import DEV, render
from tests.waiting import HANG_BOUND_SECONDS, until

KEY = "router-key-0123456789"
WITHOUT_KEY = [
    ("POST", "/v1/completions", {"json": {"model": "test-model", "prompt": "a b", "max_tokens": 1}}),
    ("POST", "/v1/chat/completions", {"json": {"model": "test-model", "messages": []}}),
    ("POST", "/v1/audio/transcriptions", {"data": {"model": "test-model"}, "files": {"file": ("a.wav", b"RIFF")}}),
    ("POST", "/v1/images/edits", {"data": {"model": "test-model"}, "files": {"image": ("a.png", b"PNG")}}),
    ("POST", "/sleep", {"params": {"id": "x"}}),
    ("GET", "/is_sleeping", {"params": {"id": "x"}}),
    ("GET", "/v1/models", {}),
    ("POST", "/tokenize", {"json": {"model": "test-model", "prompt": "a"}}),
    ("POST", "/v1/completions", {"content": b"not json"}),
]


def router_scripts() -> dict[str, str]:
    """The router ConfigMap's files of an endpoint with an API key, as the chart renders them."""
    objs = render(Environment.model_validate(DEV), "qwen2-7b")
    return next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-router-kvtiers"))[
        "data"
    ]


@pytest.fixture(
    scope="module",
    params=[API_AUTH_MODULE, PREVIOUS_API_AUTH_MODULE],
    ids=["this-release", "previous-release-router-restarting"],
)
def router(request, router_source, tmp_path_factory):  # noqa: F811 (the fixture imported above)
    """The real router on the rendered ConfigMap's files, started with this release's ``--callbacks`` or with the
    previous release's (one of its pods restarting after the deploy replaced the ConfigMap)."""
    tmp = tmp_path_factory.mktemp("router-key-check")
    for name, text in router_scripts().items():
        (tmp / name).write_text(text)
    key_file = tmp / "api-key"
    key_file.write_text(f"{KEY}\n")
    reached: list[tuple[str, str, str | None]] = []
    engine_port, port = free_port(), free_port()

    def record(method: str, path: str, header: str | None) -> bool:
        reached.append((method, path, header))
        return False

    with FakeOpenAI(port=engine_port, refuses=record, stream=False):
        args = [
            "--host", "127.0.0.1", "--port", str(port), "--service-discovery", "static",
            "--static-backends", f"http://127.0.0.1:{engine_port}", "--static-models", "test-model",
            "--routing-logic", "roundrobin", "--callbacks", f"{request.param}.callbacks", "--log-level", "warning",
        ]  # fmt: skip
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp),
            "KVTIERS_API_KEY_FILE": str(key_file),
            "PYTHONPATH": os.pathsep.join([str(tmp), str(router_source), str(STUBS)]),
        }
        log = (tmp / "router.log").open("w")
        process = subprocess.Popen(
            [str(ROUTER_VENV / "bin" / "python"), "-c", "from vllm_router.app import main; main()", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        until(
            lambda: httpx.get(f"{url}/health", timeout=5).status_code == 200,
            what="the router's /health",
            process=process,
            seen=lambda: (tmp / "router.log").read_text()[-3000:],
            poll=0.2,
        )
        try:
            yield url, reached
        finally:
            process.terminate()
            process.wait(HANG_BOUND_SECONDS)
            log.close()


def test_every_route_of_the_real_router_needs_the_key_and_nothing_keyless_reaches_the_engine(router):
    url, reached = router
    for method, path, kwargs in WITHOUT_KEY:
        answer = httpx.request(method, f"{url}{path}", timeout=10, **kwargs)
        assert answer.status_code == 401, (method, path, answer.status_code, answer.text[:200])
        assert answer.json() == {"error": "Unauthorized"}
    assert not [r for r in reached if r[1] != "/metrics"], "a keyless request reached the engine"
    for method, path in ROUTER_OPEN_ROUTES:
        assert httpx.request(method, f"{url}{path}", timeout=10).status_code == 200, path
    body = {"model": "test-model", "prompt": "a b", "max_tokens": 1}
    answer = httpx.post(f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert answer.status_code == 200, answer.text[:300]
    assert ("POST", "/v1/completions", f"Bearer {KEY}") in reached, "the router forwards the client's key"


def test_the_router_refuses_to_start_where_it_cannot_put_the_check_in_front(tmp_path):
    """Loaded without production-stack's app (another entry point), reading ``callbacks`` fails: no silent gap."""
    (tmp_path / f"{API_AUTH_MODULE}.py").write_text(module_source(API_AUTH_MODULE))
    code = f"import {API_AUTH_MODULE} as m; m.callbacks"
    done = subprocess.run(
        [str(ROUTER_VENV / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode != 0 and "vllm_router.app.app is not loaded" in done.stderr
