"""An OpenAI-style streaming server behind vLLM's own ``AuthenticationMiddleware``, run in the router venv (which has
FastAPI and uvicorn at the router's pins): ``python keyed_vllm_server.py <api_server.py> <port> <key>...``.

The middleware class is taken from the ``api_server.py`` given (the engine image's vLLM wheel); ``GET /seen`` (not
under ``/v1``, so unchecked, like vLLM's ``/health``) lists the ``Authorization`` headers of the ``/v1`` requests
that reached the app."""

from __future__ import annotations

import ast
import hashlib
import json
import secrets
import sys
from collections.abc import Awaitable
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import URL, Headers
from starlette.types import ASGIApp, Receive, Scope, Send


def middleware(source: str) -> type:
    module = ast.parse(source)
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "AuthenticationMiddleware")
    namespace = {"hashlib": hashlib, "secrets": secrets, "ASGIApp": ASGIApp, "Scope": Scope, "Receive": Receive}
    namespace.update(Send=Send, Awaitable=Awaitable, Headers=Headers, URL=URL, JSONResponse=JSONResponse)
    exec(compile(ast.Module(body=[cls], type_ignores=[]), "api_server.py", "exec"), namespace)  # noqa: S102 - the pinned wheel's own code
    return namespace["AuthenticationMiddleware"]


def main() -> None:
    source, port, keys = Path(sys.argv[1]).read_text(), int(sys.argv[2]), sys.argv[3:]
    seen: list[str | None] = []
    app = FastAPI()

    @app.get("/v1/models")
    async def models(request: Request):
        seen.append(request.headers.get("authorization"))
        return {"data": [{"id": "test-model"}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return {"count": len((await request.json())["prompt"].split())}

    @app.post("/v1/completions")
    async def completions(request: Request):
        seen.append(request.headers.get("authorization"))
        tokens = len((await request.json())["prompt"].split())

        async def events():
            yield 'data: {"choices":[{"text":"x"}]}\n\n'
            yield f"data: {json.dumps({'choices': [], 'usage': {'prompt_tokens': tokens}})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/seen")
    async def authorizations():
        return seen

    app.add_middleware(middleware(source), tokens=keys)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


if __name__ == "__main__":
    main()
