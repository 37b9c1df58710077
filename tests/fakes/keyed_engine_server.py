"""An engine's HTTP surface with kvtiers' engine key check loaded the way vLLM 0.12.0 loads ``--middleware``: the
module imported by name from its directory (the engine's ``PYTHONPATH``), a class added with ``app.add_middleware``
after the app's routes and its ``/metrics`` mount (``entrypoints/openai/api_server.py`` ``build_app``). Every route is
one vLLM declares, answering ``{"path": ...}``; FastAPI and uvicorn at the router venv's pins.

``python keyed_engine_server.py <port> <module dir> <middleware import path> <key file> <routes JSON>``, the routes a
list of ``[method, path]``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys

import uvicorn
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from starlette.routing import Mount


def main() -> None:
    port, module_dir, middleware, key_file, routes = sys.argv[1:6]
    os.environ["KVTIERS_API_KEY_FILE"] = key_file
    sys.path.insert(0, module_dir)
    app = FastAPI()
    for method, path in json.loads(routes):

        async def answer(path: str = path) -> dict:
            return {"path": path}

        app.add_api_route(path, answer, methods=[method.upper()])

    async def metrics(scope, receive, send) -> None:
        await PlainTextResponse("vllm:num_requests_running 0\n")(scope, receive, send)

    # As vLLM mounts its Prometheus app (``mount_metrics``): /metrics itself, without Starlette's slash redirect.
    route = Mount("/metrics", metrics)
    route.path_regex = re.compile("^/metrics(?P<path>.*)$")
    app.router.routes.append(route)
    module_path, object_name = middleware.rsplit(".", 1)
    imported = getattr(importlib.import_module(module_path), object_name)
    assert inspect.isclass(imported), "vLLM adds a class with app.add_middleware"
    app.add_middleware(imported)
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="error")


if __name__ == "__main__":
    main()
