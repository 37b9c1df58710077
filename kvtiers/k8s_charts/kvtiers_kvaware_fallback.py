"""kvtiers kvaware fallback: the router never sends a request to an engine that is no longer one of its endpoints.

This file runs inside the router image (production-stack ``vllm-stack-0.1.12``), not in kvtiers: the serving charts
ship it in a ConfigMap on the router's ``PYTHONPATH`` and load it with the router's documented plug-in point,
``--callbacks kvtiers_kvaware_fallback.callbacks`` (``services/callbacks_service/callbacks.py`` imports the module
before the routing logic is built; :data:`callbacks` does nothing per request).

Why: ``KvawareRouter.route_request`` (``routers/routing_logic.py``) asks the LMCache controller which engine holds
the longest prefix and returns ``instance_id_to_ip[<that instance>]``, without checking that the instance is still
among the endpoints it was given. The controller keeps a departed engine's index until that engine deregisters
(vLLM 0.12.0 never does; kvtiers' preStop hook does, but a node loss runs no hook) or its worker timeout passes.
Meanwhile every prompt it cached raises ``KeyError`` (the map was never filled for it: HTTP 500) or goes to the
departed pod's address (filled earlier: a dead connection, HTTP 500, or a pod that is shutting down). Both happen
outside ``route_general_request``'s failover loop, so no retry setting helps.

What this module changes: when the router's own answer is not one of the current endpoints (or it raised
``KeyError`` looking the instance up), the request is routed as the same method routes a cache miss: by the session
hash ring when the request carries a session id, else to the endpoint with the lowest QPS.

Longest match first: ``route_request`` takes the *first* instance of the lookup answer. LMCache 0.3.11's
``KVController.lookup`` fills that answer chunk by chunk with the first-registered instance holding each chunk
(``RegistryTree.find_kv``), so the first instance is whoever registered first among the holders of chunk 0: with a
shared system prompt, always the same engine, even when another holds a far longer prefix. This module hands
``route_request`` the answer with the instance holding the longest prefix first (same entries, other order), so the
router compares that match against its threshold and routes to its holder.

Load guard: a request without a session id that the router sends to a cache holder is routed by load instead when
the holder's QPS exceeds :data:`LOAD_GUARD_RATIO` times the least-loaded endpoint's plus :data:`LOAD_GUARD_QPS`: one
hot prefix (a popular document) then cannot pile every request onto one engine, and an engine that served it
becomes a holder too. Nothing else changes.

The module refuses to load unless ``route_request`` is exactly the reviewed 0.1.12 code (its source's SHA-256):
a router that fails at start is visible, a silently unpatched or wrongly patched one is not.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
from typing import Any

from vllm_router.routers.routing_logic import KvawareRouter
from vllm_router.services.callbacks_service.custom_callbacks import CustomCallbackHandler

SUPPORTED_ROUTER = "vllm-stack-0.1.12"
REVIEWED_ROUTE_REQUEST_SHA256 = "63c7db384328fd74659ae7c320626ff4797fc9dec851498cb642fea58aea1cc8"
"""SHA-256 of ``inspect.getsource(KvawareRouter.route_request)`` at :data:`SUPPORTED_ROUTER`."""
LOG_PREFIX = "kvtiers-kvaware-fallback"
LOAD_GUARD_RATIO = 1.5
"""A heuristic bound, not a measured optimum: with two engines it caps a hot prefix's holder at about 60 % of the
traffic (``tests/test_kvaware_threshold.py`` measures it with the router and LMCache's lookup)."""
LOAD_GUARD_QPS = 1.0
"""Requests per second of slack, so that at low traffic (QPS near 0 everywhere) cache hits are not overruled."""

TOKENIZER_MODEL_ENV = "KVTIERS_TOKENIZER_MODEL"
"""Set by the serving charts where an init container copied the router's tokenizer: the served model name."""

logger = logging.getLogger("kvtiers.kvaware_fallback")


def source_sha256(function: Any) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def route_without_cache(router: Any, endpoints: list[Any], request_stats: Any, request: Any, request_json: Any) -> str:
    """What ``KvawareRouter.route_request`` does on a cache miss (session hash ring, else lowest QPS)."""
    session_id = router.extract_session_id(request, request_json)
    router._update_hash_ring(endpoints)
    if session_id is None:
        url: str = router._qps_routing(endpoints, request_stats)
        return url
    node: str = router.hash_ring.get_node(session_id)
    return node


def longest_match_first(answer: Any) -> Any:
    """The lookup answer with its ``layout_info`` (instance -> (location, matched tokens)) longest match first."""
    layout = getattr(answer, "layout_info", None)
    if isinstance(layout, dict) and len(layout) > 1:
        answer.layout_info = dict(sorted(layout.items(), key=lambda item: item[1][1], reverse=True))
    return answer


def overloaded(url: str, endpoints: list[Any], request_stats: Any) -> bool:
    """Whether ``url`` carries more than the load guard allows against the least-loaded endpoint."""

    def qps(endpoint_url: str) -> float:
        stats = request_stats.get(endpoint_url)
        return float(stats.qps) if stats is not None else 0.0

    lowest = min(qps(endpoint.url) for endpoint in endpoints)
    return qps(url) > LOAD_GUARD_RATIO * lowest + LOAD_GUARD_QPS


def install() -> None:
    """Wrap ``KvawareRouter.route_request`` (idempotent). Refuses any other code than the reviewed one."""
    route_request = KvawareRouter.route_request
    query_manager = KvawareRouter.query_manager
    if getattr(route_request, "_kvtiers_fallback", False):
        return
    found = source_sha256(route_request)
    if found != REVIEWED_ROUTE_REQUEST_SHA256:
        raise RuntimeError(
            f"{LOG_PREFIX}: KvawareRouter.route_request is not the {SUPPORTED_ROUTER} code this module was reviewed "
            f"and tested against (source SHA-256 {found}); update kvtiers (kvtiers/catalog/versions.py) rather than "
            "run the router unpatched"
        )

    @functools.wraps(route_request)
    async def routed_to_an_endpoint(
        self: Any, endpoints: list[Any], engine_stats: Any, request_stats: Any, request: Any, request_json: Any
    ) -> str:
        try:
            url: str | None = await route_request(self, endpoints, engine_stats, request_stats, request, request_json)
        except KeyError as exc:  # the matched instance is not among the endpoints, and was never mapped
            departed: Any = exc
            url = None
        else:
            departed = url
        if url is not None and any(endpoint.url == url for endpoint in endpoints):
            if self.extract_session_id(request, request_json) is None and overloaded(url, endpoints, request_stats):
                logger.info("%s: cache holder %s is over the load guard; routing by load", LOG_PREFIX, url)
                return route_without_cache(self, endpoints, request_stats, request, request_json)
            return url
        logger.warning("%s: cache match on %s, which is not an endpoint; routing as a miss", LOG_PREFIX, departed)
        return route_without_cache(self, endpoints, request_stats, request, request_json)

    @functools.wraps(query_manager)
    async def answered_longest_match_first(self: Any, msg: Any) -> Any:
        return longest_match_first(await query_manager(self, msg))

    routed_to_an_endpoint._kvtiers_fallback = True  # type: ignore[attr-defined]
    KvawareRouter.route_request = routed_to_an_endpoint
    KvawareRouter.query_manager = answered_longest_match_first


def check_tokenizer() -> None:
    """Load now the tokenizer the router loads on its first kvaware request (``AutoTokenizer.from_pretrained(<served
    model name>)``, ``routing_logic.py``), where an init container copied it. A copy without a usable tokenizer, or a
    served name huggingface_hub refuses as a repository id, would otherwise make production-stack tokenize every
    request through one engine's ``/tokenize`` (synchronously, on the event loop) without a word; this fails the
    start instead, with the reason."""
    model = os.environ.get(TOKENIZER_MODEL_ENV)
    if not model:
        return
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(model)
    except Exception as exc:
        raise RuntimeError(
            f"{LOG_PREFIX}: the router cannot load the tokenizer of {model!r} from its cache "
            f"({type(exc).__name__}: {exc}); the tokenizer-sync init container's log says what it copied"
        ) from exc


install()
check_tokenizer()
callbacks = CustomCallbackHandler()
"""The ``--callbacks`` object the router requires: its base class (not abstract at 0.1.12: no ``ABCMeta``), which does
nothing per request. The fallback is installed when this module loads."""
