"""A tiny Kubernetes API server on 127.0.0.1 for the verify tests.

It serves exactly what ``kvtiers verify`` reads: node and pod lists (equality label selectors), StatefulSets,
DaemonSets, Deployments, PVCs, and the ``pods|services/<name>:<port>/proxy/<path>`` subresource, whose answers
come from Python handlers registered per target. Like the API server's authentication filter, the proxy passes no
``Authorization`` header on (a handler is called without one). A pod registered with :meth:`FakeKube.serve_pod` also
serves its handler over real HTTP on a loopback port, which the ``pods/<name>/portforward`` subresource relays to
(see :class:`PortForwardRelay`): there, the request's headers reach the handler as sent. For the router's pod discovery it also serves one pod by name and
pod watches (``?watch=true``: the matching pods as ``ADDED``, then every :meth:`FakeKube.update_pod` and
:meth:`FakeKube.delete_pod` as it happens, one JSON event a line, on a connection that stays open). The kubernetes client talks to it through a
``Configuration(host=http://127.0.0.1:<port>)``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import queue
import re
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client
from websocket import ABNF, frame_buffer

from kvtiers.k8s_charts.kvtiers_api_auth import UNAUTHORIZED, KeyCheckMiddleware
from tests.fakes.loopback import LoopbackServer, send_text

# handler(method, path, body) -> (status, content type, text); pod handlers served over HTTP (serve_pod) are also
# given the request's Authorization header as ``authorization=`` (None through the proxy, which strips it)
ProxyHandler = Callable[..., tuple[int, str, str]]

PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|services)/([^/:]+):(\d+)/proxy/?(.*)$")
PORTFORWARD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward$")
COLLECTION = re.compile(r"^/apis?/(?:v1|[^/]+/[^/]+)/namespaces/[^/]+/[a-z]+$")


def matches(labels: dict, selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def status(code: int, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "code": code,
        "reason": "NotFound" if code == 404 else "Error",
    }


WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455, section 1.3: appended to the client's ``Sec-WebSocket-Key`` before hashing it for the answer."""
CHANNEL_PROTOCOL = "v4.channel.k8s.io"
"""The port-forward subprotocol the API server, the kubelet and the CRI streaming server accept with binary frames
(k8s.io/kubelet ``pkg/cri/streaming/portforward/websocket.go``: ``"v4." + wsstream.ChannelWebSocketProtocol``; no
``Sec-WebSocket-Protocol`` at all gets the same framing); the kubernetes Python client asks for it
(``kubernetes/stream/ws_client.py`` ``create_websocket``)."""


class PortForwardRelay:
    """One port of a ``pods/<name>/portforward`` stream, from the 101 answer on, as the API server, the kubelet and
    containerd serve it together (k8s.io/kubelet ``websocket.go`` ``handleWebSocketStreams``, containerd
    ``sandbox_portforward_linux.go``): every binary frame starts with its channel byte, 0 the port's data and 1 its
    errors; each channel opens with a frame holding the port (unsigned 16 bits, little endian); then the stream is
    relayed to a TCP connection to the pod's port (here a loopback address). When nothing accepts the connection,
    the error channel carries the runtime's message and the stream ends."""

    DATA, ERROR = b"\x00", b"\x01"

    def __init__(self, connection: socket.socket, reader: Any, pod: str, port: int) -> None:
        self._connection, self._pod, self._port = connection, pod, port
        self._frames = frame_buffer(self._recv(reader), skip_utf8_validation=True)
        self._send_lock = threading.Lock()

    @staticmethod
    def _recv(reader: Any) -> Callable[[int], bytes]:
        def recv(size: int) -> bytes:
            data = reader.read1(size)
            if not data:
                raise ConnectionError("the client closed the websocket")
            return data

        return recv

    def _send(self, opcode: int, payload: bytes) -> None:
        # Server frames are not masked (RFC 6455, section 5.1).
        with self._send_lock:
            self._connection.sendall(ABNF(1, 0, 0, 0, opcode, 0, payload).format())

    def run(self, target: tuple[str, int] | None) -> None:
        opening = struct.pack("<H", self._port)
        self._send(ABNF.OPCODE_BINARY, self.DATA + opening)
        self._send(ABNF.OPCODE_BINARY, self.ERROR + opening)
        try:
            if target is None:
                raise ConnectionRefusedError("connection refused")
            upstream = socket.create_connection(target, timeout=10)
        except OSError as exc:
            message = (
                f"error forwarding port {self._port} to pod {self._pod}, uid : failed to execute portforward in "
                f"network namespace: failed to connect to localhost:{self._port} inside namespace: {exc}"
            )
            self._send(ABNF.OPCODE_BINARY, self.ERROR + message.encode())
            self._send(ABNF.OPCODE_CLOSE, struct.pack("!H", 1000))
            return
        upstream.settimeout(None)
        back = threading.Thread(target=self._pod_to_client, args=(upstream,), daemon=True)
        back.start()
        try:
            self._client_to_pod(upstream)
        finally:
            back.join(5)
            upstream.close()

    def _client_to_pod(self, upstream: socket.socket) -> None:
        while True:
            try:
                frame = self._frames.recv_frame()
            except Exception:  # noqa: BLE001 - EOF, or any of websocket-client's protocol errors: the client is gone
                break
            if frame.opcode == ABNF.OPCODE_CLOSE:
                self._send(ABNF.OPCODE_CLOSE, struct.pack("!H", 1000))
                break
            if frame.opcode == ABNF.OPCODE_PING:
                self._send(ABNF.OPCODE_PONG, frame.data)
                continue
            data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
            if frame.opcode == ABNF.OPCODE_BINARY and data[:1] == self.DATA:
                upstream.sendall(data[1:])
        try:
            upstream.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _pod_to_client(self, upstream: socket.socket) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                self._send(ABNF.OPCODE_BINARY, self.DATA + data)
            self._send(ABNF.OPCODE_CLOSE, struct.pack("!H", 1000))
        except OSError:
            pass  # the client went away first


class PodServer(LoopbackServer):
    """A pod's port over HTTP on loopback, answered by the handler registered for it in ``fake.proxies`` (looked up
    at each request, so a test that replaces the handler replaces what both the proxy and a port-forward reach),
    given the request's ``Authorization`` header."""

    def __init__(self, fake: FakeKube, key: tuple[str, str, str, int]) -> None:
        self._fake, self._key = fake, key
        self._serve()

    def _handler(self):
        pod = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                handler = pod._fake.proxies.get(pod._key)
                if handler is None:
                    code, ctype, text = json_reply(404, {"detail": "Not Found"})
                else:
                    code, ctype, text = handler(
                        method, self.path, body, authorization=self.headers.get("Authorization")
                    )
                send_text(self, code, ctype, text)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

        return Handler

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)


class FakeKube(LoopbackServer):
    def __init__(self) -> None:
        self.nodes: list[dict] = []
        self.pods: list[dict] = []
        self.objects: dict[str, dict] = {}
        """Path (``/apis/apps/v1/namespaces/<ns>/statefulsets/<name>`` ...) -> object."""
        self.proxies: dict[tuple[str, str, str, int], ProxyHandler] = {}
        self.pod_servers: dict[tuple[str, str, int], PodServer] = {}
        """(namespace, pod, port) -> the loopback HTTP server a port-forward to that port relays to."""
        self.files = tempfile.TemporaryDirectory(prefix="kvtiers-fake-kube-")
        """Files the fake pods mount (the engines' key files)."""
        self.portforward_forbidden = False
        """Answer every port-forward 403, as the API server does to an identity without create on pods/portforward."""
        self.log: list[tuple[str, str]] = []
        self._watches: list[tuple[str, str | None, queue.Queue]] = []
        self._watch_lock = threading.Lock()
        self._serve()

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration(host=self.url)
        return client.ApiClient(configuration)

    # ------------------------------------------------------------------ builders

    def add_node(self, name: str, labels: dict, ready: bool = True) -> None:
        self.nodes.append(
            {
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    "addresses": [{"type": "InternalIP", "address": f"10.0.0.{len(self.nodes) + 1}"}],
                },
            }
        )

    def node_ip(self, name: str) -> str | None:
        node = next((n for n in self.nodes if n["metadata"]["name"] == name), None)
        return node["status"]["addresses"][0]["address"] if node else None

    def add_pod(
        self, namespace: str, name: str, labels: dict, node: str, ready: bool = True, spec: dict | None = None
    ) -> dict:
        """``spec``: the pod's spec as its template renders it (default: one bare container)."""
        pod = {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {**copy.deepcopy(spec or {"containers": [{"name": "main"}]}), "nodeName": node},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "hostIP": self.node_ip(node),
            },
        }
        self.pods.append(pod)
        return pod

    def pod(self, name: str) -> dict:
        return next(p for p in self.pods if p["metadata"]["name"] == name)

    def _notify(self, event: str, pod: dict) -> None:
        with self._watch_lock:
            for namespace, selector, events in self._watches:
                if pod["metadata"]["namespace"] == namespace and matches(pod["metadata"]["labels"], selector):
                    events.put({"type": event, "object": json.loads(json.dumps(pod))})

    def update_pod(self, name: str, change: Callable[[dict], None]) -> None:
        """Apply ``change`` to the pod and tell the watches (``MODIFIED``)."""
        pod = self.pod(name)
        change(pod)
        self._notify("MODIFIED", pod)

    def delete_pod(self, name: str) -> None:
        pod = self.pod(name)
        self.pods.remove(pod)
        self._notify("DELETED", pod)

    def _watch(self, handler: BaseHTTPRequestHandler, namespace: str, selector: str | None) -> None:
        events: queue.Queue = queue.Queue()
        with self._watch_lock:
            for pod in self.pods:
                if pod["metadata"]["namespace"] == namespace and matches(pod["metadata"]["labels"], selector):
                    events.put({"type": "ADDED", "object": json.loads(json.dumps(pod))})
            watch = (namespace, selector, events)
            self._watches.append(watch)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            while True:
                try:
                    event = events.get(timeout=0.5)
                except queue.Empty:
                    if self._stopping:
                        return
                    continue
                line = json.dumps(event).encode() + b"\n"
                handler.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                handler.wfile.flush()
        except OSError:
            pass  # the watcher went away
        finally:
            with self._watch_lock:
                self._watches.remove(watch)

    _stopping = False

    def __exit__(self, *exc) -> None:
        self._stopping = True
        for server in self.pod_servers.values():
            server.__exit__(*exc)
        super().__exit__(*exc)
        self.files.cleanup()

    def put(self, path: str, obj: dict) -> None:
        self.objects[path] = obj

    def proxy(self, kind: str, namespace: str, name: str, port: int, handler: ProxyHandler) -> None:
        self.proxies[(kind, namespace, name, port)] = handler

    def serve_pod(self, namespace: str, name: str, port: int, handler: ProxyHandler) -> None:
        """``handler`` answers the pod proxy to ``name:port`` and, over HTTP on loopback, a port-forward to it."""
        self.proxy("pods", namespace, name, port, handler)
        if (namespace, name, port) not in self.pod_servers:
            server = PodServer(self, ("pods", namespace, name, port))
            self.pod_servers[(namespace, name, port)] = server.__enter__()

    def _portforward(self, handler: BaseHTTPRequestHandler, namespace: str, name: str, query: dict) -> None:
        """``GET .../pods/<name>/portforward?ports=<port>`` upgraded to a websocket (RFC 6455 handshake), or the
        API server's Status when it refuses: 403 (RBAC), 404 (no such pod), 400 (bad request)."""
        self.log.append(("GET", handler.path))

        def refuse(code: int, message: str) -> None:
            data = json.dumps(status(code, message)).encode()
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        if self.portforward_forbidden:
            refuse(
                403,
                f'pods "{name}" is forbidden: User "kvtiers-verify" cannot create resource "pods/portforward" in '
                f'API group "" in the namespace "{namespace}"',
            )
            return
        if not any((p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name) for p in self.pods):
            refuse(404, f'pods "{name}" not found')
            return
        ports = [p for value in query.get("ports", ()) for p in value.split(",")]
        key = handler.headers.get("Sec-WebSocket-Key")
        protocols = [p.strip() for p in (handler.headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
        if len(ports) != 1 or not ports[0].isdigit():
            refuse(400, 'query parameter "port" is required (one port here)')
            return
        if (handler.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            refuse(400, "Upgrade request required")
            return
        if protocols and CHANNEL_PROTOCOL not in protocols:
            refuse(400, f"requested protocol(s) are not supported: {protocols}")
            return
        accept = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        if protocols:
            handler.send_header("Sec-WebSocket-Protocol", CHANNEL_PROTOCOL)
        handler.end_headers()
        handler.close_connection = True
        port = int(ports[0])
        server = self.pod_servers.get((namespace, name, port))
        relay = PortForwardRelay(handler.connection, handler.rfile, name, port)
        relay.run(server.address if server is not None else None)

    # ------------------------------------------------------------------ HTTP

    def _route(self, method: str, raw_path: str, body: dict | None) -> tuple[int, str, str]:
        url = urlparse(raw_path)
        path, query = url.path, parse_qs(url.query)
        selector = (query.get("labelSelector") or [None])[0]
        self.log.append((method, raw_path))
        proxied = PROXY.match(path)
        if proxied:
            ns, kind, name, port, rest = proxied.groups()
            handler = self.proxies.get((kind, ns, name, int(port)))
            if handler is None:
                return 503, "application/json", json.dumps(status(503, f"no endpoints available for {kind} {name}"))
            return handler(method, "/" + rest + (f"?{url.query}" if url.query else ""), body)
        if method != "GET":
            return 405, "application/json", json.dumps(status(405, "method not allowed"))
        if path == "/api/v1/nodes":
            items = [n for n in self.nodes if matches(n["metadata"]["labels"], selector)]
            return 200, "application/json", json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": items})
        named = re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$", path)
        if named:
            found = [p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == named.groups()]
            if found:
                return 200, "application/json", json.dumps(found[0])
        listed = re.match(r"^/api/v1/namespaces/([^/]+)/pods$", path)
        if listed:
            ns = listed.group(1)
            items = [
                p for p in self.pods if p["metadata"]["namespace"] == ns and matches(p["metadata"]["labels"], selector)
            ]
            return 200, "application/json", json.dumps({"kind": "PodList", "apiVersion": "v1", "items": items})
        if path in self.objects:
            return 200, "application/json", json.dumps(self.objects[path])
        if COLLECTION.match(path):
            # A namespaced collection: the stored objects one level below it (the API server lists none as empty).
            items = [o for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]
            return 200, "application/json", json.dumps({"kind": "List", "apiVersion": "v1", "items": items})
        return 404, "application/json", json.dumps(status(404, f"{path} not found"))

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                forwarded = PORTFORWARD.match(url.path)
                if method == "GET" and forwarded:
                    fake._portforward(self, forwarded.group(1), forwarded.group(2), query)
                    return
                watched = re.match(r"^/api/v1/namespaces/([^/]+)/pods$", url.path)
                if method == "GET" and watched and (query.get("watch") or [""])[0].lower() == "true":
                    fake.log.append((method, self.path))
                    fake._watch(self, watched.group(1), (query.get("labelSelector") or [None])[0])
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                code, ctype, text = fake._route(method, self.path, body)
                send_text(self, code, ctype, text)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler


def json_reply(code: int, body) -> tuple[int, str, str]:
    return code, "application/json", json.dumps(body)


class FakeCurvineMaster:
    """The Curvine master's web API (``/api/overview``, ``/api/browse``, ``/api/block_locations``) over a flat set of
    files, each with the hostnames of the workers holding its blocks, as v0.4.1's router_handler.rs serves them."""

    def __init__(self, overview: dict) -> None:
        self.overview = overview
        self.files: dict[str, list[str]] = {}
        self.mtime_ms = 0

    def write(self, path: str, block_hosts: list[str]) -> None:
        self.files[path] = block_hosts

    def _children(self, directory: str) -> list[dict]:
        prefix = directory.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self.files if p.startswith(prefix)}
        out = []
        for name in sorted(names):
            path = prefix + name
            is_dir = path not in self.files
            out.append(
                {"path": path, "name": name, "is_dir": is_dir, "mtime": self.mtime_ms or int(time.time() * 1000)}
            )
        return out

    def __call__(self, method: str, path: str, body: dict | None) -> tuple[int, str, str]:
        url = urlparse(path)
        target = (parse_qs(url.query).get("path") or [""])[0]
        if url.path == "/api/overview":
            return json_reply(200, self.overview)
        if url.path == "/api/browse":
            return json_reply(200, self._children(target))
        if url.path == "/api/block_locations" and target in self.files:
            locs = [
                {
                    "block": {"id": i},
                    "locs": [{"worker_id": 1, "hostname": h, "ip_addr": h, "rpc_port": 8997, "web_port": 9001}],
                    "has_spdk": False,
                }
                for i, h in enumerate(self.files[target])
            ]
            return json_reply(200, {"status": {"path": target, "is_dir": False}, "block_locs": locs})
        return json_reply(404, {})


class FakeEngine:
    """vLLM + LMCache behind the pod proxy: /tokenize, /v1/completions and /metrics with lmcache:* counters.

    Engines sharing one ``l2`` set model the Curvine L2: a prompt stored by one is a full hit on another.
    """

    def __init__(
        self,
        model: str,
        l2: set | None,
        lmcache: bool = True,
        on_store: Callable[[str], None] | None = None,
    ) -> None:
        self.model, self.l2, self.lmcache, self.on_store = model, l2, lmcache, on_store
        self.key_check: KeyCheckMiddleware | None = None
        """The engine's key check (``kvtiers_api_auth.KeyCheckMiddleware`` over its mounted key file): set, the engine
        refuses what it refuses."""
        self.vllm_counters = True
        self.stored = 0
        self.hit = 0
        self.local: set[str] = set()

    def __call__(
        self, method: str, path: str, body: dict | None, authorization: str | None = None
    ) -> tuple[int, str, str]:
        # The engines' check itself, on the request as ASGI presents it (the path without its query).
        headers = [(b"authorization", authorization.encode())] if authorization is not None else []
        scope = {"type": "http", "method": method, "path": urlparse(path).path, "headers": headers}
        if self.key_check is not None and not self.key_check.allows(scope):
            return json_reply(401, UNAUTHORIZED)
        if path == "/version" and method == "GET":
            return json_reply(200, {"version": "0.12.0"})
        if path == "/tokenize" and method == "POST":
            return json_reply(200, {"count": len(body["prompt"].split())})
        if path == "/v1/chat/completions" and method == "POST":
            return json_reply(200, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
        if path == "/v1/completions" and method == "POST":
            if body.get("model") != self.model:
                return json_reply(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
            prompt = body["prompt"]
            n = len(prompt.split())
            shared = self.l2 if self.l2 is not None else self.local
            if prompt in shared:
                self.hit += n
            else:
                self.stored += n
                shared.add(prompt)
                if self.on_store is not None:
                    self.on_store(prompt)
            return json_reply(200, {"choices": [{"text": "x"}], "usage": {"prompt_tokens": n}})
        if path == "/metrics":
            lines = ["# HELP vllm:num_requests_running running", 'vllm:num_requests_running{model_name="m"} 0']
            if self.vllm_counters:  # vLLM 0.12.0: every prompt token is queried; the L2's hits are connector hits
                queried = self.stored + self.hit
                lines += [
                    f'vllm:prefix_cache_queries_total{{model_name="{self.model}",engine="0"}} {float(queried)}',
                    f'vllm:prefix_cache_hits_total{{model_name="{self.model}",engine="0"}} 0.0',
                    f'vllm:external_prefix_cache_hits_total{{model_name="{self.model}",engine="0"}} {float(self.hit)}',
                ]
            if self.lmcache:
                lines += [
                    "# TYPE lmcache:num_stored_tokens counter",
                    f'lmcache:num_stored_tokens_total{{model_name="{self.model}",worker_id="0"}} {float(self.stored)}',
                    f'lmcache:num_stored_tokens_created{{model_name="{self.model}",worker_id="0"}} 1.7e9',
                    f'lmcache:num_hit_tokens_total{{model_name="{self.model}",worker_id="0"}} {float(self.hit)}',
                    f'lmcache:num_remote_read_bytes_total{{model_name="{self.model}",worker_id="0"}} {self.hit * 1024.0}',
                ]
            return 200, "text/plain; version=0.0.4", "\n".join(lines) + "\n"
        return json_reply(404, {"detail": "Not Found"})
