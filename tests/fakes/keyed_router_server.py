"""An OpenAI-style streaming server that checks keys as kvtiers' routers do: it reads the ``callbacks`` object of
``kvtiers_api_auth`` (the module the router ConfigMap ships, loaded from its file, in the router venv with FastAPI and
uvicorn at the router's pins) with its app where production-stack keeps it, which puts the key check in front of
every route, and asks ``pre_request`` as production-stack's ``route_general_request`` does. The real router is in
``tests/test_router_key_check.py``. ``python keyed_router_server.py <port> <kvtiers_api_auth.py> <key file>``; ``GET /seen`` lists the
``Authorization`` headers of the requests that got through."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse


def main() -> None:
    port, module_file, key_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.environ["KVTIERS_API_KEY_FILE"] = key_file
    app = FastAPI()
    # Where production-stack keeps the app it serves: reading ``callbacks`` puts the key check in front of it.
    router_app = types.ModuleType("vllm_router.app")
    router_app.app = app  # type: ignore[attr-defined]
    sys.modules["vllm_router.app"] = router_app
    spec = importlib.util.spec_from_file_location("kvtiers_api_auth", module_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    callbacks = module.callbacks
    seen: list[str | None] = []

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.body()
        refused = callbacks.pre_request(request, body, json.loads(body))
        if refused is not None:
            return refused
        seen.append(request.headers.get("authorization"))
        tokens = len(json.loads(body)["prompt"].split())

        async def events():
            yield 'data: {"choices":[{"text":"x"}]}\n\n'
            yield f"data: {json.dumps({'choices': [], 'usage': {'prompt_tokens': tokens}})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/seen")
    async def authorizations():
        return seen

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


if __name__ == "__main__":
    main()
