"""kvaware routes a long, partly cached prompt by cache with the threshold kvtiers renders, and by load with the
router's default: production-stack vllm-stack-0.1.12's own ``KvawareRouter.route_request`` (read from the tag, never
copied into the project), run with stand-ins only for what it calls outside itself (the tokenizer, the LMCache
controller's lookup answer, its web framework and hash ring).

The router's rule (``src/vllm_router/routers/routing_logic.py``): it falls back to load (or session) routing when
``matched_tokens < max(len(prompt_tokens) - threshold, 0)``, i.e. when more than ``threshold`` prompt tokens are not
cached; ``--kv-aware-threshold`` defaults to 2000 (``src/vllm_router/parsers/parser.py``). Needs the repository
mirror (``make upstream-mirrors``); skipped without it.
"""

from __future__ import annotations

import abc
import asyncio
import json
import os
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass

import pytest

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts.serving.router import router_args
from tests import test_router_rollout as rollout
from tests.conftest import CONFIG_DIR, ROOT
from tests.upstream import require_upstream

TAG = "vllm-project/production-stack@vllm-stack-0.1.12"
router_source = rollout.router_source
"""The router's ``src/`` at the tag (a fixture)."""
PROD = load_environment(CONFIG_DIR / "prod.yaml")
KVAWARE = next(e for e in PROD.serving.endpoints if e.routing == "kvaware")


def source(path: str) -> str:
    return require_upstream(f"{TAG}:{path}")


@dataclass
class Endpoint:
    url: str
    model_names: list[str]


@dataclass
class Stats:
    qps: float


class Answer:
    """What LMCache 0.3.11's controller answers a ``LookupMsg`` with: per instance, (location, matched tokens)."""

    def __init__(self, layout_info: dict) -> None:
        self.layout_info = layout_info
        self.instance_id = None


def routing_logic() -> types.ModuleType:
    """``routing_logic.py`` from the tag, imported with stand-in modules for its outside dependencies."""
    stubs = {
        "requests": types.ModuleType("requests"),
        "fastapi": types.ModuleType("fastapi"),
        "uhashring": types.ModuleType("uhashring"),
        "vllm_router": types.ModuleType("vllm_router"),
        "vllm_router.log": types.ModuleType("vllm_router.log"),
        "vllm_router.service_discovery": types.ModuleType("vllm_router.service_discovery"),
        "vllm_router.stats": types.ModuleType("vllm_router.stats"),
        "vllm_router.stats.engine_stats": types.ModuleType("vllm_router.stats.engine_stats"),
        "vllm_router.stats.request_stats": types.ModuleType("vllm_router.stats.request_stats"),
        "vllm_router.utils": types.ModuleType("vllm_router.utils"),
    }
    stubs["fastapi"].HTTPException = Exception
    stubs["fastapi"].Request = object

    class HashRing:
        def __init__(self) -> None:
            self.nodes: set[str] = set()

        def get_nodes(self):
            return list(self.nodes)

        def add_node(self, node):
            self.nodes.add(node)

        def remove_node(self, node):
            self.nodes.discard(node)

    stubs["uhashring"].HashRing = HashRing
    stubs["vllm_router.log"].init_logger = lambda name: __import__("logging").getLogger(name)
    stubs["vllm_router.service_discovery"].EndpointInfo = Endpoint
    stubs["vllm_router.stats.engine_stats"].EngineStats = object
    stubs["vllm_router.stats.request_stats"].RequestStats = Stats
    stubs["vllm_router.utils"].SingletonABCMeta = abc.ABCMeta
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        module = types.ModuleType("vllm_router_routing_logic")
        code = compile(source("src/vllm_router/routers/routing_logic.py"), "routing_logic.py", "exec")
        exec(code, module.__dict__)  # noqa: S102 - the router's own code from the tag is what this test runs
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    # The LMCache message classes are only constructed and handed to the controller stand-in below.
    module.LookupMsg = lambda tokens, event_id: ("lookup", len(tokens))
    return module


def route(threshold: int, prompt_tokens: int, cached_tokens: int) -> str:
    """Where the router sends a prompt of which ``cached_tokens`` are in engine A's cache; B has less load."""
    module = routing_logic()
    # Not __init__: it starts LMCache's controller on its ports; route_request reads only these attributes.
    router = object.__new__(module.KvawareRouter)
    router.threshold = threshold
    router.session_key = None
    router.hash_ring = module.HashRing()
    router.instance_id_to_ip = {"instance-a": "http://engine-a:8000"}
    router.tokenizer = types.SimpleNamespace(encode=lambda prompt: list(range(prompt_tokens)))

    async def query_manager(msg):
        return Answer({"instance-a": ("LocalCPUBackend", cached_tokens)})

    router.query_manager = query_manager
    endpoints = [Endpoint("http://engine-a:8000", [KVAWARE.model]), Endpoint("http://engine-b:8000", [KVAWARE.model])]
    stats = {"http://engine-a:8000": Stats(qps=5.0), "http://engine-b:8000": Stats(qps=1.0)}
    return asyncio.run(router.route_request(endpoints, {}, stats, None, {"prompt": "x"}))


def rendered_threshold() -> int:
    router = model.router(PROD, KVAWARE)
    args = router_args(name=KVAWARE.name, namespace=PROD.serving.namespace, router=router, controller=None)
    return int(args[args.index("--kv-aware-threshold") + 1])


def test_the_router_parses_the_threshold_flag_kvtiers_renders():
    parser = source("src/vllm_router/parsers/parser.py")
    flag = parser[parser.index('"--kv-aware-threshold"') :]
    assert "type=int" in flag[:200] and "default=2000" in flag[:200]
    # prod: 4,000-token prompts, kvaware_min_cached_tokens at its default (half the prompt)
    assert KVAWARE.kvaware_min_cached_tokens is None
    assert rendered_threshold() == KVAWARE.expected_prompt_tokens - KVAWARE.expected_prompt_tokens // 2 == 2000


def test_a_prompt_goes_to_the_cache_when_its_match_reaches_the_minimum_and_by_load_below_it():
    """prod's kvaware endpoint: 4,000-token prompts; matches of at least half of them go to the engine holding them."""
    assert route(rendered_threshold(), 4000, 2000) == "http://engine-a:8000"
    assert route(rendered_threshold(), 4000, 1999) == "http://engine-b:8000", "a short match (a shared prefix)"
    # a prompt far longer than expected needs a longer match: the threshold counts uncached tokens
    assert route(rendered_threshold(), 12000, 2500) == "http://engine-b:8000"


def test_the_minimum_cached_prefix_is_rendered_and_checked():
    data = KVAWARE.model_dump(exclude_unset=True)
    assert type(KVAWARE).model_validate({**data, "kvaware_min_cached_tokens": 1000}).kv_aware_threshold == 3000
    for value, message in (
        (4000, "kvaware_min_cached_tokens must be below expected_prompt_tokens \\(4000\\), got 4000"),
        (0, "greater than or equal to 1"),
    ):
        with pytest.raises(ValueError, match=message):
            type(KVAWARE).model_validate({**data, "kvaware_min_cached_tokens": value})
    other = next(e for e in PROD.serving.endpoints if e.routing != "kvaware")
    with pytest.raises(ValueError, match="kvaware_min_cached_tokens applies to routing 'kvaware' only"):
        type(other).model_validate({**other.model_dump(exclude_unset=True), "kvaware_min_cached_tokens": 100})


def test_the_threshold_is_rendered_only_for_kvaware():
    for endpoint in PROD.serving.endpoints:
        if endpoint.serving != "self_managed":
            continue
        args = router_args(
            name=endpoint.name,
            namespace=PROD.serving.namespace,
            router=model.router(PROD, endpoint),
            controller=None,
        )
        assert ("--kv-aware-threshold" in args) == (endpoint.routing == "kvaware"), endpoint.name


def test_a_threshold_on_another_strategy_is_refused():
    from kvtiers.k8s_charts.serving.props import Router

    with pytest.raises(ValueError, match="kv_aware_threshold applies to routing 'kvaware' only, not 'session'"):
        Router(image="example/router:1", routing="session", replicas=1, session_key="x", kv_aware_threshold=4000)
    with pytest.raises(ValueError, match="kv_aware_threshold"):
        Router(image="example/router:1", routing="kvaware", replicas=1, kv_aware_threshold=0)


def shares(router_source, threshold: int, mix: str) -> dict[str, dict[str, int]]:
    """Requests per engine and prompt kind: the router and LMCache 0.3.11's lookup in ``.venv-router``, with the
    fallback module kvtiers ships (``tests/fakes/kvaware_share.py``)."""
    scripts = router_source.parent / "scripts"
    scripts.mkdir(exist_ok=True)
    shutil.copy(ROOT / "kvtiers" / "k8s_charts" / "kvtiers_kvaware_fallback.py", scripts)
    run = subprocess.run(
        [
            str(rollout.ROUTER_VENV / "bin" / "python"),
            str(ROOT / "tests" / "fakes" / "kvaware_share.py"),
            str(threshold),
            "1",
            mix,
        ],
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.pathsep.join([str(scripts), str(router_source), str(rollout.STUBS)]),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.skipif(rollout.skip_reason() is not None, reason=rollout.skip_reason() or "")
def test_a_shared_system_prompt_spreads_over_the_engines_and_a_document_goes_to_its_longest_holder(router_source):
    """Two engines hold a 1,024-token system prompt; engine b alone also a 1,536-token document after it. LMCache
    0.3.11's lookup names the first-registered holder of each chunk, so the router's first answer is engine a for
    every prompt: with the threshold at the whole prompt, a took all the traffic, the document prompts too."""
    got = shares(router_source, rendered_threshold(), "shared")
    total = {engine: got["shared"][engine] + got["document"][engine] for engine in ("a", "b")}
    assert got["document"]["b"] >= 0.9 * sum(got["document"].values()), got
    assert max(total.values()) <= 0.65 * sum(total.values()), got


@pytest.mark.skipif(rollout.skip_reason() is not None, reason=rollout.skip_reason() or "")
def test_one_hot_document_does_not_pile_onto_its_holder(router_source):
    """Every prompt carries the same long document: cached matches win, but the load guard bounds the holder's share."""
    got = shares(router_source, rendered_threshold(), "document")["document"]
    assert min(got.values()) >= 0.35 * sum(got.values()), got
