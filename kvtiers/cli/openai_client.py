"""A minimal OpenAI-compatible streaming client that measures time to first token.

One persistent ``httpx.Client`` per base URL; :meth:`StreamingClient.connect` opens (and warms) the connection
before any timing, so TTFT excludes TCP set-up. TTFT is measured on ``time.perf_counter`` (monotonic) from just
before the request is written to the first streamed chunk that carries generated text.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Self

import httpx


class BenchError(Exception):
    """A request failed in a way the user must fix (server down, HTTP error, no streaming...)."""


@dataclass(frozen=True)
class Completion:
    ttft_ms: float
    total_ms: float
    prompt_tokens: int | None
    text: str


def unauthorized(where: str, authorization: str | None) -> str:
    """The message for an HTTP 401: which key was sent, never the key."""
    from kvtiers.cli.api_key import UNAUTHORIZED_HINT

    if authorization:
        return (
            f"{where}: HTTP 401 Unauthorized: the server refused the API key sent (rotated? a key of another endpoint?)"
        )
    return f"{where}: HTTP 401 Unauthorized without an API key: {UNAUTHORIZED_HINT}"


class StreamingClient:
    def __init__(self, url: str, model: str, timeout: float = 120.0, max_tokens: int = 8, api_key: str | None = None):
        self.url = url.rstrip("/")
        self.model = model
        self.max_tokens = max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers=headers,
            # TCP_NODELAY: without it Nagle + delayed ACK add ~40 ms to small request writes on a kept-alive socket.
            transport=httpx.HTTPTransport(
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            ),
        )
        self._tokenize_supported: bool | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise BenchError(f"cannot connect to {self.url}: {exc} (is the server up and the URL right?)") from None
        except httpx.TimeoutException:
            raise BenchError(f"{self.url}{path}: timed out") from None
        except httpx.HTTPError as exc:
            raise BenchError(f"{self.url}{path}: {exc}") from None

    def connect(self) -> None:
        """Open the persistent connection (GET /v1/models) so that no timed request pays for it."""
        response = self._request("GET", "/v1/models")
        if response.status_code == 401:
            raise BenchError(unauthorized(f"{self.url}/v1/models", self._http.headers.get("Authorization")))
        if response.status_code >= 500:
            raise BenchError(f"{self.url}/v1/models: HTTP {response.status_code}: {response.text[:200]}")

    def count_tokens(self, prompt: str) -> int | None:
        """Token count from the server's ``/tokenize`` (vLLM), or ``None`` when it has none."""
        if self._tokenize_supported is False:
            return None
        response = self._request("POST", "/tokenize", json={"model": self.model, "prompt": prompt})
        if response.status_code in (404, 405, 501):
            self._tokenize_supported = False
            return None
        if response.status_code >= 400:
            raise BenchError(f"{self.url}/tokenize: HTTP {response.status_code}: {response.text[:200]}")
        try:
            body = response.json()
            count = body.get("count")
            if count is None:
                count = len(body["tokens"])
        except (ValueError, KeyError, TypeError, AttributeError):
            self._tokenize_supported = False
            return None
        self._tokenize_supported = True
        return int(count)

    def complete(self, prompt: str) -> Completion:
        """One streamed completion; raises :class:`BenchError` on anything but a proper event stream."""
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        first: float | None = None
        usage: int | None = None
        parts: list[str] = []
        start = time.perf_counter()
        try:
            with self._http.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code == 401:
                    raise BenchError(
                        unauthorized(f"{self.url}/v1/completions", self._http.headers.get("Authorization"))
                    )
                if response.status_code >= 400:
                    response.read()
                    raise BenchError(f"{self.url}/v1/completions: HTTP {response.status_code}: {response.text[:300]}")
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    response.read()
                    raise BenchError(
                        f"{self.url}/v1/completions did not stream (content-type {ctype or 'none'!r}); "
                        "TTFT needs a server that honours stream=true"
                    )
                done = False
                for line in response.iter_lines():
                    # Read to the end of the body even after [DONE], so the connection returns to the pool.
                    if done or not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise BenchError(f"{self.url}: malformed stream chunk {data[:120]!r}") from None
                    if chunk.get("error"):
                        raise BenchError(f"{self.url}: server error in stream: {chunk['error']}")
                    for choice in chunk.get("choices") or []:
                        text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                        if text:
                            if first is None:
                                first = time.perf_counter()
                            parts.append(text)
                    if chunk.get("usage"):
                        usage = chunk["usage"].get("prompt_tokens", usage)
        except httpx.ConnectError as exc:
            raise BenchError(f"cannot connect to {self.url}: {exc} (is the server up and the URL right?)") from None
        except httpx.TimeoutException:
            raise BenchError(f"{self.url}/v1/completions: timed out") from None
        except httpx.HTTPError as exc:
            raise BenchError(f"{self.url}/v1/completions: {exc}") from None
        end = time.perf_counter()
        if first is None:
            raise BenchError(f"{self.url}/v1/completions: the stream ended without a generated token")
        return Completion(
            ttft_ms=(first - start) * 1000, total_ms=(end - start) * 1000, prompt_tokens=usage, text="".join(parts)
        )
