"""Where kvaware sends traffic that shares a system prompt: run in ``.venv-router`` (Python 3.12).

production-stack's own ``KvawareRouter.route_request`` (from the tag on ``PYTHONPATH``) asks LMCache 0.3.11's own
``KVController.lookup`` over its own ``RegistryTree``; only the tokenizer (prompts are token lists already), the
endpoints and the router's QPS bookkeeping are stand-ins. Engines register in order (``a`` first) and every engine
admits the full chunks of each prompt it serves, as an LMCache worker does.

Usage: ``python kvaware_share.py <threshold> <fallback 0|1> <mix>``; ``mix`` is ``shared`` (three of four prompts
share only the system prompt, one in four also a document that engine ``b`` alone holds) or ``document`` (every prompt
is the document one). Prints, as JSON, the requests each engine received per prompt kind.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import types

from lmcache.v1.cache_controller.controllers.kv_controller import KVController
from lmcache.v1.cache_controller.utils import RegistryTree
from vllm_router.routers.routing_logic import KvawareRouter

ENGINES = ("a", "b")
PROMPT_TOKENS = 4000
SYSTEM_TOKENS = 1024
"""Four LMCache chunks (256 tokens each) every engine holds."""
DOCUMENT_TOKENS = 1536
"""Six more chunks after the system prompt, held by engine ``b`` alone at the start."""
REQUESTS = 400
WINDOW = 40
"""The QPS stand-in: requests per engine among the last ``WINDOW`` routed, at 10 requests per second overall."""


def url(engine: str) -> str:
    return f"http://engine-{engine}:8000"


def main(threshold: int, fallback: bool, mix: str) -> dict[str, dict[str, int]]:
    if fallback:
        import kvtiers_kvaware_fallback  # noqa: F401 - installs itself as --callbacks does

    registry = RegistryTree()
    for engine in ENGINES:
        registry.register_worker(f"engine-{engine}", 0, f"10.0.0.{ord(engine)}", 8000, None, None, 0.0)
    controller = KVController(registry)

    def admit(engine: str, tokens: list[int]) -> None:
        for _, _, key in controller.token_database.process_tokens(tokens, make_key=False):
            registry.admit_kv(f"engine-{engine}", 0, "LocalCPUBackend", key)

    system = list(range(SYSTEM_TOKENS))
    document = system + list(range(10**6, 10**6 + DOCUMENT_TOKENS))
    for engine in ENGINES:
        admit(engine, system)
    admit("b", document)

    # Not __init__: it starts the controller's sockets; route_request reads only these attributes.
    router = object.__new__(KvawareRouter)
    router.threshold = threshold
    router.session_key = None
    router.req_id = 0
    router.tokenizer = types.SimpleNamespace(encode=lambda prompt: list(prompt))
    router.kv_manager = types.SimpleNamespace(handle_orchestration_message=controller.lookup)
    router.instance_id_to_ip = {f"engine-{engine}": url(engine) for engine in ENGINES}
    from uhashring import HashRing

    router.hash_ring = HashRing()
    endpoints = [types.SimpleNamespace(url=url(engine), model_names=["m"]) for engine in ENGINES]
    recent: collections.deque[str] = collections.deque(maxlen=WINDOW)
    received = {kind: {engine: 0 for engine in ENGINES} for kind in ("shared", "document")}
    for i in range(REQUESTS):
        kind = "document" if mix == "document" or i % 4 == 3 else "shared"
        head = document if kind == "document" else system
        unique = list(range(10**7 + i * PROMPT_TOKENS, 10**7 + i * PROMPT_TOKENS + PROMPT_TOKENS - len(head)))
        tokens = head + unique
        stats = {
            url(engine): types.SimpleNamespace(qps=recent.count(engine) * 10 / WINDOW)
            for engine in ENGINES
            if recent.count(engine)
        }
        chosen = asyncio.run(
            router.route_request(endpoints, {}, stats, types.SimpleNamespace(headers={}), {"prompt": tokens})
        )
        engine = next(engine for engine in ENGINES if url(engine) == chosen)
        received[kind][engine] += 1
        recent.append(engine)
        admit(engine, tokens)
    return received


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3])))
