"""A Prometheus HTTP API on 127.0.0.1 that answers ``/api/v1/query`` with recorded results, optionally only to
SigV4-signed requests (service ``aps``), as an Amazon Managed Service for Prometheus workspace does."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.fakes.loopback import LoopbackServer, send_json


class FakePrometheus(LoopbackServer):
    def __init__(self, results: dict[str, list[tuple[dict, float]]], *, require_sigv4: str | None = None) -> None:
        self.results = results
        """Query text -> ``[(labels, value), ...]``; an unknown query answers an empty vector."""
        self.require_sigv4 = require_sigv4
        """A region: refuse (403) requests without a SigV4 signature for ``<region>/aps``."""
        self.queries: list[str] = []
        self.authorizations: list[str] = []
        self._serve()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, code: int, body) -> None:
                send_json(self, code, body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path.rstrip("/").split("/")[-3:] != ["api", "v1", "query"]:
                    return self._reply(404, {"status": "error", "error": "not found"})
                auth = self.headers.get("Authorization", "")
                fake.authorizations.append(auth)
                if fake.require_sigv4 and not (
                    auth.startswith("AWS4-HMAC-SHA256 ") and f"/{fake.require_sigv4}/aps/aws4_request" in auth
                ):
                    return self._reply(403, {"message": "Missing Authentication Token"})
                query = parse_qs(url.query)["query"][0]
                fake.queries.append(query)
                if query.startswith("bad("):
                    return self._reply(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})
                result = [
                    {"metric": labels, "value": [1700000000, str(value)]}
                    for labels, value in fake.results.get(query, [])
                ]
                self._reply(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

        return Handler
