"""kvtiers API key check: an endpoint's router and its engines answer 401 to a request without one of the endpoint's
API keys, so that no path to a model, through the router or straight to an engine, serves without a key.

This file runs inside the router image (production-stack ``vllm-stack-0.1.12``) and the engine image (vLLM 0.12.0),
not in kvtiers: the serving charts ship it in each one's ConfigMap on its ``PYTHONPATH``. Both load the same ASGI
middleware, :class:`KeyCheckMiddleware`, in front of every route of their app, and it refuses whatever is not one of
a few keyless routes (deny by default: a route a later release adds needs a key too):

- each engine through vLLM's ``--middleware kvtiers_api_auth.KeyCheckMiddleware`` (``entrypoints/openai/
  api_server.py`` ``build_app`` adds a class with ``app.add_middleware`` after its own middleware, so this check runs
  first). vLLM's own key check would not do: it covers only paths under ``/v1``, and ``/invocations``, ``/pooling``,
  ``/score``, ``/pause`` and more serve outside it. The engines' NetworkPolicy admits, besides the router, the API
  server's pod proxy and the metrics collector from the EKS subnets, which the system nodes' pods share; this check
  is what keeps those pods from calling a model. The router forwards the client's ``Authorization`` header
  (``services/request_service/request.py`` ``_build_backend_request_headers``), so one key passes both checks;
- the router through its ``--callbacks kvtiers_api_auth.callbacks``: production-stack imports this module and reads
  ``callbacks`` while it sets the app up, before uvicorn serves it (``app.py`` ``initialize_all``,
  ``services/callbacks_service/callbacks.py``); reading ``callbacks`` adds the middleware to that app
  (``vllm_router.app.app``) and fails the router's start where it cannot. ``pre_request``, which production-stack
  calls only in ``route_general_request``, would miss the multipart routes (``/v1/audio/transcriptions``,
  ``/v1/images/edits``) and the sleep routes, and would run after the router read the whole body; it stays as a
  second check.

No key is on a command line or in an environment: vLLM 0.12.0 logs every non-default argument at start
(``entrypoints/utils.py`` ``log_non_default_args``). Both read the key file (the endpoint's Secrets Manager secret,
mounted by the Secrets Store CSI driver) again whenever it changes, so a rotated secret reaches the checks without a
restart.

What the check accepts is vLLM's rule: ``Authorization: Bearer <key>`` (scheme case-insensitive), the key one of the
whitespace-separated keys of the file (during a rotation, the new and the old one), compared in constant time. A
request with more than one ``Authorization`` header is refused (the router checks the first and forwards the last).
A file that cannot be read or holds no key refuses every request that needs one (fail closed).

The router loads one ``--callbacks`` module: the modules named in ``KVTIERS_ROUTER_MODULES`` (kvaware's fallback) are
imported first, at the same moment the router would have imported them.
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
import sys
import threading
from typing import Any

KEY_FILE_ENV = "KVTIERS_API_KEY_FILE"
"""Where the endpoint's keys are mounted (set by the serving charts)."""
MODULES_ENV = "KVTIERS_ROUTER_MODULES"
"""Space-separated kvtiers modules to import before this one's check is used (the kvaware fallback)."""
UNAUTHORIZED = {"error": "Unauthorized"}
"""vLLM 0.12.0's body for a refused key, so clients see one answer whichever side refused them."""
Route = tuple[str, str]
"""``(method, path)``, the path exactly as the app routes it."""
ENGINE_OPEN_ROUTES: frozenset[Route] = frozenset(
    {
        ("GET", "/health"),  # the kubelet's probes
        ("GET", "/metrics"),  # the metrics collector, the router's engine stats, the drain hook, kvtiers verify
        ("GET", "/v1/models"),  # the router's pod discovery (service_discovery.py), which sends no key
        ("GET", "/is_sleeping"),  # the same discovery, with an engine started in sleep mode
        ("POST", "/tokenize"),  # kvaware's remote fallback (routing_logic.py) sends no key; kvtiers verify
    }
)
"""What an engine serves without a key (vLLM 0.12.0's routes): none runs the model or touches a KV cache.
production-stack's router would send ``VLLM_API_KEY`` on its own calls; kvtiers leaves it unset, so that no key is in
an environment."""
ROUTER_OPEN_ROUTES: frozenset[Route] = frozenset(
    {
        ("GET", "/health"),  # the kubelet's probes
        ("GET", "/metrics"),  # the metrics collector, kvtiers verify (kvaware's counters)
        ("GET", "/engines"),  # kvtiers verify: which engines the discovery found
    }
)
"""What a router serves without a key (production-stack vllm-stack-0.1.12's routes)."""
ROUTER_APP_MODULE = "vllm_router.app"
"""Where production-stack's router keeps the app it serves (``app = FastAPI(...)``; ``main`` runs it)."""


class KeyFile:
    """The keys of a file, read again when it changes: a rotation writes a new file (a new inode), by default ASCP
    3.1.1 itself, a temporary file renamed over the old one (``server/server.go`` ``writeFile``), else the driver's
    atomic writer, a new directory behind a swapped symlink (v1.6.0 ``pkg/util/fileutil/atomic_writer.go``). ASCP
    rewrites the file on every fetch, changed or not (each rotation poll, about every two minutes), so a new inode
    alone is no rotation: the keys are logged only when the content differs."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._keys: tuple[bytes, ...] = ()
        self._loaded = False

    def keys(self) -> tuple[bytes, ...]:
        try:
            stat = os.stat(self._path)
        except OSError:
            return ()
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    with open(self._path, "rb") as f:
                        keys = tuple(f.read().split())
                except OSError:
                    return ()
                self._stamp = stamp
                if keys != self._keys or not self._loaded:
                    self._keys, self._loaded = keys, True
                    # The count only, never a key: an empty secret shows here, not only as 401s.
                    loaded = f"{len(keys)} key(s)" if keys else "no key (every request that needs one: 401)"
                    print(f"kvtiers_api_auth: {self._path}: {loaded}", file=sys.stderr, flush=True)
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
    """The object ``--callbacks`` names: ``pre_request`` refuses a request without a key (a second check behind the
    middleware, on the routes production-stack calls it for); ``post_request`` does nothing."""

    def __init__(self, key_file: KeyFile) -> None:
        self._key_file = key_file

    def pre_request(self, request: Any, request_body: bytes, request_json: Any) -> Any:  # noqa: ARG002 (the router's signature)
        if authorized(request.headers.get("authorization"), self._key_file.keys()):
            return None
        from fastapi.responses import JSONResponse

        return JSONResponse(UNAUTHORIZED, status_code=401)

    def post_request(self, request: Any, response_content: bytes) -> None:  # noqa: ARG002 (the router's signature)
        return None


def _authorizations(scope: dict[str, Any]) -> list[str]:
    return [value.decode("latin-1") for name, value in scope.get("headers", ()) if name.lower() == b"authorization"]


class KeyCheckMiddleware:
    """ASGI middleware: a request that is not one of ``open_routes`` needs one of the keys in ``$KVTIERS_API_KEY_FILE``.
    HTTP requests without one get vLLM's 401 before the app reads their body; WebSocket handshakes are closed (HTTP
    403).

    :param open_routes: what is served without a key. @default :data:`ENGINE_OPEN_ROUTES` (vLLM's ``--middleware``
        constructs the class with its app alone)
    :param key_file: the keys' file. @default ``$KVTIERS_API_KEY_FILE``
    """

    def __init__(
        self, app: Any, open_routes: frozenset[Route] = ENGINE_OPEN_ROUTES, key_file: str | None = None
    ) -> None:
        self.app = app
        self.open_routes = open_routes
        self._key_file = KeyFile(key_file if key_file is not None else os.environ.get(KEY_FILE_ENV, ""))

    def allows(self, scope: dict[str, Any]) -> bool:
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if scope["type"] == "http" and (scope["method"], path) in self.open_routes:
            return True
        presented = _authorizations(scope)
        return len(presented) == 1 and authorized(presented[0], self._key_file.keys())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self.allows(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(UNAUTHORIZED).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _router_callbacks() -> KeyCheck:
    """The router's ``callbacks``, with the middleware added to the app the router is about to serve."""
    app = getattr(sys.modules.get(ROUTER_APP_MODULE), "app", None)
    if app is None:
        raise RuntimeError(
            f"kvtiers_api_auth: {ROUTER_APP_MODULE}.app is not loaded; start the router with its console script "
            "(vllm-router), which serves that app, so that every route checks the API key"
        )
    app.add_middleware(KeyCheckMiddleware, open_routes=ROUTER_OPEN_ROUTES)
    return KeyCheck(KeyFile(os.environ.get(KEY_FILE_ENV, "")))


def __getattr__(name: str) -> Any:
    """``callbacks``, built once when the router reads it (``getattr(module, "callbacks")``), not at import: the
    engines import this module for the middleware alone."""
    if name != "callbacks":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    callbacks = globals()["callbacks"] = _router_callbacks()
    return callbacks


for _module in os.environ.get(MODULES_ENV, "").split():
    importlib.import_module(_module)
