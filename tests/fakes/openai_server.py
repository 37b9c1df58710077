"""A tiny OpenAI-compatible streaming server with known cold and warm delays.

Tokens are whitespace-separated words. Time to first token = ``base_s + per_token_s * uncached`` where ``uncached``
is the number of prompt tokens after the longest previously seen prompt that is a prefix of this one, so a
repeated prompt costs ``base_s`` (warm) and a fresh one ``base_s + per_token_s * tokens`` (cold). Several servers
can share one ``seen`` store (a cross-replica L2).

Like vLLM it also answers ``/tokenize`` with token ids (one per word) and ``/metrics`` with the scheduler's
``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` gauges: the completions in flight plus ``busy``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
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


def token_ids(text: str) -> list[int]:
    """One token per word, with a stable id (what a tokenizer gives the router and the engine alike)."""
    return [zlib.crc32(word.encode()) % 32000 for word in text.split()]


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
        host: str = "127.0.0.1",
        port: int = 0,
        on_completion: Callable[[list[int]], None] | None = None,
        refuses: Callable[[str, str, str | None], bool] | None = None,
    ) -> None:
        """:param on_completion: called with the prompt's token ids after each completion (the engine stores its KV).
        :param refuses: given a request's method, path and ``Authorization`` header, whether the engine's key check
            answers 401 (the paths refused are kept in ``refused``)."""
        self.base_s, self.per_token_s = base_s, per_token_s
        self.store = store or PrefixStore()
        self.tokenize, self.stream, self.status, self.reply = tokenize, stream, status, reply
        self.connections = 0
        self.requests: list[dict] = []
        self.on_completion = on_completion
        self.refuses = refuses
        self.refused: list[str] = []
        self.arrivals: list[float] = []
        """``time.monotonic()`` at each completion request's arrival."""
        self._connections: set[socket.socket] = set()
        self.in_flight = 0
        self.busy = 0
        """Requests the ``/metrics`` gauges report beyond the completions in flight (a drain test sets it)."""
        self._lock = threading.Lock()
        self._serve(host, port)

    def kill(self) -> None:
        """Stop as a dead process does: refuse new connections and cut the open ones (keep-alive clients too)."""
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self._connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

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
                fake._connections.add(self.request)

            def finish(self) -> None:
                fake._connections.discard(self.request)
                super().finish()

            def _json(self, code: int, body) -> None:
                send_json(self, code, body)

            def _body(self) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _refused(self) -> bool:
                if fake.refuses is None or not fake.refuses(self.command, self.path, self.headers.get("Authorization")):
                    return False
                fake.refused.append(self.path)
                self._json(401, {"error": "Unauthorized"})
                return True

            def do_GET(self) -> None:
                if self._refused():
                    return
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
                elif self.path == "/metrics":
                    running = fake.in_flight + fake.busy
                    labels = '{engine="0",model_name="test-model"}'
                    data = (
                        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                        "# TYPE vllm:num_requests_running gauge\n"
                        f"vllm:num_requests_running{labels} {float(running)}\n"
                        "# TYPE vllm:num_requests_waiting gauge\n"
                        f"vllm:num_requests_waiting{labels} 0.0\n"
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self._body()
                if self._refused():
                    return
                if self.path == "/tokenize":
                    if not fake.tokenize:
                        self._json(404, {"detail": "Not Found"})
                        return
                    tokens = token_ids(body["prompt"])
                    self._json(200, {"count": len(tokens), "max_model_len": 32768, "tokens": tokens})
                    return
                if self.path != "/v1/completions":
                    self._json(404, {"error": "not found"})
                    return
                fake.arrivals.append(time.monotonic())
                fake.requests.append(body)
                if fake.status != 200:
                    self._json(fake.status, {"error": {"message": "model overloaded", "code": fake.status}})
                    return
                tokens = body["prompt"].split()
                cached = fake.store.cached_tokens(tokens)
                with fake._lock:
                    fake.in_flight += 1
                try:
                    time.sleep(fake.expected_ttft(len(tokens), cached))
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                fake.store.add(tokens)
                if fake.on_completion is not None:
                    fake.on_completion(token_ids(body["prompt"]))
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
