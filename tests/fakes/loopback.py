"""A threaded HTTP server on 127.0.0.1 for the test fakes: start on ``with``, stop and close on exit."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def send_text(handler: BaseHTTPRequestHandler, code: int, content_type: str, text: str) -> None:
    """Write ``text`` as the response with its length (keep-alive clients need it)."""
    data = text.encode()
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def send_json(handler: BaseHTTPRequestHandler, code: int, body) -> None:
    send_text(handler, code, "application/json", json.dumps(body))


class LoopbackServer:
    """Subclasses implement ``_handler()`` returning a request handler class, and call ``_serve()`` in __init__."""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def _serve(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host`` (any loopback address: engines of one test can each have their own, as pods do) and
        ``port`` (0: a free one)."""
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
