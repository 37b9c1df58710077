"""kvtiers router key check: the router answers 401 to a request without one of the endpoint's API keys, on every
route it proxies, before it reaches an engine.

This file runs inside the router image (production-stack ``vllm-stack-0.1.12``), not in kvtiers: the serving charts
ship it in a ConfigMap on the router's ``PYTHONPATH`` and load it with the router's documented plug-in point,
``--callbacks kvtiers_router_auth.callbacks`` (``services/callbacks_service/callbacks.py`` takes the module's
``callbacks`` object; ``services/request_service/request.py`` ``route_general_request`` calls its ``pre_request`` for
every proxied route and returns the response it gives instead of proxying).

Why, beside vLLM's own check: vLLM 0.12.0 checks keys only on paths under ``/v1`` (``api_server.py``
``AuthenticationMiddleware``), and the router also proxies ``/tokenize``, ``/detokenize``, ``/score`` and ``/rerank``
(``routers/main_router.py``). The router reads the key file (the endpoint's Secrets Manager secret, mounted by the
Secrets Store CSI driver) again whenever it changes, so a rotated secret reaches this check without a restart.

What the check accepts is vLLM's rule: ``Authorization: Bearer <key>`` (scheme case-insensitive), the key one of the
whitespace-separated keys of the file (during a rotation, the new and the old one), compared in constant time.
A file that cannot be read or holds no key refuses every request (fail closed).

The router loads one ``--callbacks`` module: the modules named in ``KVTIERS_ROUTER_MODULES`` (kvaware's fallback) are
imported first, at the same moment the router would have imported them.
"""

from __future__ import annotations

import hmac
import importlib
import os
import threading
from typing import Any

KEY_FILE_ENV = "KVTIERS_API_KEY_FILE"
"""Where the endpoint's keys are mounted (set by the serving charts)."""
MODULES_ENV = "KVTIERS_ROUTER_MODULES"
"""Space-separated kvtiers modules to import before this one's check is used (the kvaware fallback)."""
UNAUTHORIZED = {"error": "Unauthorized"}
"""vLLM 0.12.0's body for a refused key, so clients see one answer whichever side refused them."""


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


for _module in os.environ.get(MODULES_ENV, "").split():
    importlib.import_module(_module)

callbacks = KeyCheck(KeyFile(os.environ.get(KEY_FILE_ENV, "")))
