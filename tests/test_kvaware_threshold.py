"""kvaware routes a long, partly cached prompt by cache with the threshold kvtiers renders, and by load with the
router's default: production-stack vllm-stack-0.1.12's own ``KvawareRouter.route_request`` (read from the tag, never
copied into the project), run with stand-ins only for what it calls outside itself (the tokenizer, the LMCache
controller's lookup answer, its web framework and hash ring).

The router's rule (``src/vllm_router/routers/routing_logic.py``): it falls back to load (or session) routing when
``matched_tokens < max(len(prompt_tokens) - threshold, 0)``, i.e. when more than ``threshold`` prompt tokens are not
cached; ``--kv-aware-threshold`` defaults to 2000 (``src/vllm_router/parsers/parser.py``). Needs the repository
mirror (``KVTIERS_UPSTREAM_MIRRORS``); skipped without it.
"""

from __future__ import annotations

import abc
import asyncio
import sys
import types
from dataclasses import dataclass

import pytest

from kvtiers.config import load_environment
from kvtiers.k8s_charts.serving.router import router_args
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import CONFIG_DIR
from tests.test_observability_rules import upstream_text

TAG = "vllm-project/production-stack@vllm-stack-0.1.12"
PROD = load_environment(CONFIG_DIR / "prod.yaml")
KVAWARE = next(e for e in PROD.serving.endpoints if e.routing == "kvaware")


def source(path: str) -> str:
    text = upstream_text(f"{TAG}:{path}")
    if text is None:
        pytest.skip(f"{TAG} not available offline (set KVTIERS_UPSTREAM_MIRRORS)")
    return text


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
    router = wiring.router(PROD, KVAWARE)
    args = router_args(name=KVAWARE.name, namespace=PROD.serving.namespace, router=router, controller=None)
    return int(args[args.index("--kv-aware-threshold") + 1])


def test_the_router_parses_the_threshold_flag_kvtiers_renders():
    parser = source("src/vllm_router/parsers/parser.py")
    flag = parser[parser.index('"--kv-aware-threshold"') :]
    assert "type=int" in flag[:200] and "default=2000" in flag[:200]
    assert rendered_threshold() == KVAWARE.expected_prompt_tokens == 4000


def test_a_long_partly_cached_prompt_goes_to_the_cache_with_the_rendered_threshold_and_by_load_without():
    """prod's kvaware endpoint: 4,000-token prompts of which a 1,000-token prefix is cached on engine A."""
    assert route(2000, 4000, 1000) == "http://engine-b:8000", "the router's default ignores the cache"
    assert route(rendered_threshold(), 4000, 1000) == "http://engine-a:8000"
    # a prompt far longer than expected with little cached still goes by load: the threshold is a bound, not 'always'
    assert route(rendered_threshold(), 12000, 1000) == "http://engine-b:8000"


def test_the_threshold_is_rendered_only_for_kvaware():
    for endpoint in PROD.serving.endpoints:
        if endpoint.serving != "self_managed":
            continue
        args = router_args(
            name=endpoint.name,
            namespace=PROD.serving.namespace,
            router=wiring.router(PROD, endpoint),
            controller=None,
        )
        assert ("--kv-aware-threshold" in args) == (endpoint.routing == "kvaware"), endpoint.name


def test_a_threshold_on_another_strategy_is_refused():
    from kvtiers.k8s_charts.serving.props import Router

    with pytest.raises(ValueError, match="kv_aware_threshold applies to routing 'kvaware' only, not 'session'"):
        Router(image="r:1", routing="session", replicas=1, session_key="x", kv_aware_threshold=4000)
    with pytest.raises(ValueError, match="kv_aware_threshold"):
        Router(image="r:1", routing="kvaware", replicas=1, kv_aware_threshold=0)
