"""A tiny OpenAI-compatible streaming server with known cold and warm delays.

Tokens are whitespace-separated words. Time to first token = ``base_s + per_token_s * uncached`` where ``uncached``
is the number of prompt tokens after the longest previously seen prompt that is a prefix of this one, so a
repeated prompt costs ``base_s`` (warm) and a fresh one ``base_s + per_token_s * tokens`` (cold). Several servers
can share one ``seen`` store (a cross-replica L2).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.fakes.loopback import LoopbackServer, send_json


class PrefixStore:
    def __init__(self) -> None:
        self.prompts: list[list[str]] = []
        self.lock = threading.Lock()

    def cached_tokens(self, tokens: list[str]) -> int:
        with self.lock:
            best = 0
            for seen in self.prompts:
                if len(seen) <= len(tokens) and tokens[: len(seen)] == seen:
                    best = max(best, len(seen))
            return best

    def add(self, tokens: list[str]) -> None:
        with self.lock:
            self.prompts.append(tokens)


class FakeOpenAI(LoopbackServer):
    def __init__(
        self,
        base_s: float = 0.01,
        per_token_s: float = 0.0002,
        store: PrefixStore | None = None,
        tokenize: bool = True,
        stream: bool = True,
        status: int = 200,
        reply: str = "ok fine",
    ) -> None:
        self.base_s, self.per_token_s = base_s, per_token_s
        self.store = store or PrefixStore()
        self.tokenize, self.stream, self.status, self.reply = tokenize, stream, status, reply
        self.connections = 0
        self.requests: list[dict] = []
        self._serve()

    def expected_ttft(self, tokens: int, cached: int = 0) -> float:
        return self.base_s + self.per_token_s * (tokens - cached)

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                fake.connections += 1

            def _json(self, code: int, body) -> None:
                send_json(self, code, body)

            def _body(self) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self._body()
                if self.path == "/tokenize":
                    if not fake.tokenize:
                        self._json(404, {"detail": "Not Found"})
                        return
                    self._json(200, {"count": len(body["prompt"].split()), "max_model_len": 32768})
                    return
                if self.path != "/v1/completions":
                    self._json(404, {"error": "not found"})
                    return
                fake.requests.append(body)
                if fake.status != 200:
                    self._json(fake.status, {"error": {"message": "model overloaded", "code": fake.status}})
                    return
                tokens = body["prompt"].split()
                cached = fake.store.cached_tokens(tokens)
                time.sleep(fake.expected_ttft(len(tokens), cached))
                fake.store.add(tokens)
                usage = {"prompt_tokens": len(tokens), "completion_tokens": 2, "total_tokens": len(tokens) + 2}
                if not fake.stream or not body.get("stream"):
                    self._json(200, {"choices": [{"text": fake.reply, "index": 0}], "usage": usage})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = [{"choices": [{"text": w + " ", "index": 0}]} for w in fake.reply.split()]
                if (body.get("stream_options") or {}).get("include_usage"):
                    events.append({"choices": [], "usage": usage})
                for event in events:
                    self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler
