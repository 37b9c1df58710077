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
hash ring when the request carries a session id, else to the endpoint with the lowest QPS. Nothing else changes.

The module refuses to load unless ``route_request`` is exactly the reviewed 0.1.12 code (its source's SHA-256):
a router that fails at start is visible, a silently unpatched or wrongly patched one is not.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
from typing import Any

from vllm_router.routers.routing_logic import KvawareRouter
from vllm_router.services.callbacks_service.custom_callbacks import CustomCallbackHandler

SUPPORTED_ROUTER = "vllm-stack-0.1.12"
REVIEWED_ROUTE_REQUEST_SHA256 = "63c7db384328fd74659ae7c320626ff4797fc9dec851498cb642fea58aea1cc8"
"""SHA-256 of ``inspect.getsource(KvawareRouter.route_request)`` at :data:`SUPPORTED_ROUTER`."""
LOG_PREFIX = "kvtiers-kvaware-fallback"

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


def install() -> None:
    """Wrap ``KvawareRouter.route_request`` (idempotent). Refuses any other code than the reviewed one."""
    route_request = KvawareRouter.route_request
    if getattr(route_request, "_kvtiers_fallback", False):
        return
    found = source_sha256(route_request)
    if found != REVIEWED_ROUTE_REQUEST_SHA256:
        raise RuntimeError(
            f"{LOG_PREFIX}: KvawareRouter.route_request is not the {SUPPORTED_ROUTER} code this module was reviewed "
            f"and tested against (source SHA-256 {found}); update kvtiers (kvtiers/config/versions.py) rather than "
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
            return url
        logger.warning("%s: cache match on %s, which is not an endpoint; routing as a miss", LOG_PREFIX, departed)
        return route_without_cache(self, endpoints, request_stats, request, request_json)

    routed_to_an_endpoint._kvtiers_fallback = True  # type: ignore[attr-defined]
    KvawareRouter.route_request = routed_to_an_endpoint


install()
callbacks = CustomCallbackHandler()
"""The ``--callbacks`` object the router requires: its base class (not abstract at 0.1.12: no ``ABCMeta``), which does
nothing per request. The fallback is installed when this module loads."""
