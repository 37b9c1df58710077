"""kvtiers API key check: an endpoint's router and its engines answer 401 to a request without one of the endpoint's
API keys, so that no path to a model, through the router or straight to an engine, serves without a key.

This file runs inside the router image (production-stack ``vllm-stack-0.1.12``) and the engine image (vLLM 0.12.0),
not in kvtiers: the serving charts ship it in each one's ConfigMap on its ``PYTHONPATH``, and each loads it with its
documented plug-in point:

- the router with ``--callbacks kvtiers_api_auth.callbacks`` (``services/callbacks_service/callbacks.py`` takes the
  module's ``callbacks`` object; ``services/request_service/request.py`` ``route_general_request`` calls its
  ``pre_request`` for every proxied route and returns the response it gives instead of proxying). vLLM's own check
  would not do: it covers only paths under ``/v1`` (``api_server.py`` ``AuthenticationMiddleware``), and the router
  also proxies ``/tokenize``, ``/detokenize``, ``/score`` and ``/rerank`` (``routers/main_router.py``);
- each engine with ``--middleware kvtiers_api_auth.EngineKeyCheck`` (``api_server.py`` ``build_app`` adds a class
  with ``app.add_middleware``, after its own middleware, so this check runs first). The engines' NetworkPolicy
  admits, besides the router, the API server's pod proxy and the metrics collector from the EKS subnets, which the
  system nodes' pods share: without this check, any pod there could call a model without a key. The router
  forwards the client's ``Authorization`` header (``request.py`` ``_build_backend_request_headers``), so one key
  passes both checks. An engine answers without a key only what the router, the collector, the kubelet's probes and
  ``kvtiers verify`` ask for without one (:data:`OPEN_PATHS`); every other path, a future one included, needs a key.

Neither takes the key itself on its command line: vLLM 0.12.0 logs every non-default argument at start
(``entrypoints/utils.py`` ``log_non_default_args``). Both read the key file (the endpoint's Secrets Manager secret,
mounted by the Secrets Store CSI driver) again whenever it changes, so a rotated secret reaches the checks without a
restart.

What the check accepts is vLLM's rule: ``Authorization: Bearer <key>`` (scheme case-insensitive), the key one of the
whitespace-separated keys of the file (during a rotation, the new and the old one), compared in constant time.
A file that cannot be read or holds no key refuses every request that needs one (fail closed).

The router loads one ``--callbacks`` module: the modules named in ``KVTIERS_ROUTER_MODULES`` (kvaware's fallback) are
imported first, at the same moment the router would have imported them.
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
import threading
from typing import Any

KEY_FILE_ENV = "KVTIERS_API_KEY_FILE"
"""Where the endpoint's keys are mounted (set by the serving charts)."""
MODULES_ENV = "KVTIERS_ROUTER_MODULES"
"""Space-separated kvtiers modules to import before this one's check is used (the kvaware fallback)."""
UNAUTHORIZED = {"error": "Unauthorized"}
"""vLLM 0.12.0's body for a refused key, so clients see one answer whichever side refused them."""
OPEN_PATHS = frozenset(
    {
        "/health",  # the kubelet's probes; the SageMaker-style /ping is the same handler
        "/ping",
        "/metrics",  # the metrics collector, the router's engine stats, the drain hook, kvtiers verify
        "/load",
        "/version",
        "/is_sleeping",  # the router's pod discovery (service_discovery.py), which sends no key
        "/v1/models",
        "/tokenize",  # kvaware's remote fallback (routing_logic.py) sends no key; no model runs
        "/detokenize",
    }
)
"""Paths an engine serves without a key, exactly as written (vLLM 0.12.0's routes): none runs the model or touches a
KV cache. production-stack's router calls ``/v1/models``, ``/is_sleeping``, ``/metrics`` and kvaware's ``/tokenize``
fallback without a key (it would send ``VLLM_API_KEY``, which kvtiers leaves unset so that no key is in an
environment)."""


class KeyFile:
    """The keys of a file, read again when its modification time or size changes (the CSI driver's rotation writes
    a new file)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._keys: tuple[bytes, ...] = ()

    def keys(self) -> tuple[bytes, ...]:
        try:
            stat = os.stat(self._path)
        except OSError:
            return ()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    with open(self._path, "rb") as f:
                        self._keys = tuple(f.read().split())
                except OSError:
                    return ()
                self._stamp = stamp
            return self._keys


def authorized(header: str | None, keys: tuple[bytes, ...]) -> bool:
    """``header`` is ``Bearer <one of keys>``; every key is compared (constant time, no early exit on a match)."""
    if not header or not keys:
        return False
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    presented = token.strip().encode()
    return sum(hmac.compare_digest(presented, key) for key in keys) > 0


class KeyCheck:
    """The object ``--callbacks`` names: ``pre_request`` refuses a request without a key; ``post_request`` does
    nothing (the router calls it after each response)."""

    def __init__(self, key_file: KeyFile) -> None:
        self._key_file = key_file

    def pre_request(self, request: Any, request_body: bytes, request_json: Any) -> Any:  # noqa: ARG002 (the router's signature)
        if authorized(request.headers.get("authorization"), self._key_file.keys()):
            return None
        from fastapi.responses import JSONResponse

        return JSONResponse(UNAUTHORIZED, status_code=401)

    def post_request(self, request: Any, response_content: bytes) -> None:  # noqa: ARG002 (the router's signature)
        return None


def engine_needs_key(path: str) -> bool:
    return path not in OPEN_PATHS


def _authorization(scope: dict[str, Any]) -> str | None:
    """The request's first ``Authorization`` header, as Starlette's ``Headers.get`` (and so the router) reads it."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            return value.decode("latin-1")
    return None


class EngineKeyCheck:
    """The ASGI middleware ``--middleware`` names: vLLM constructs it with its app alone, so the key file comes from
    the environment. HTTP requests without a key get vLLM's 401; WebSocket handshakes are closed (HTTP 403)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._key_file = KeyFile(os.environ.get(KEY_FILE_ENV, ""))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if not engine_needs_key(path) or authorized(_authorization(scope), self._key_file.keys()):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(UNAUTHORIZED).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


for _module in os.environ.get(MODULES_ENV, "").split():
    importlib.import_module(_module)

callbacks = KeyCheck(KeyFile(os.environ.get(KEY_FILE_ENV, "")))
