"""A tiny Kubernetes API server on 127.0.0.1 for the verify tests.

It serves exactly what ``kvtiers verify`` reads: node and pod lists (equality label selectors), StatefulSets,
DaemonSets, Deployments, PVCs, and the ``pods|services/<name>:<port>/proxy/<path>`` subresource, whose answers
come from Python handlers registered per target. For the router's pod discovery it also serves one pod by name and
pod watches (``?watch=true``: the matching pods as ``ADDED``, then every :meth:`FakeKube.update_pod` and
:meth:`FakeKube.delete_pod` as it happens, one JSON event a line, on a connection that stays open). The kubernetes client talks to it through a
``Configuration(host=http://127.0.0.1:<port>)``.
"""

from __future__ import annotations

import copy
import json
import queue
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from kubernetes import client

from tests.fakes.loopback import LoopbackServer

# handler(method, path, body) -> (status, content type, text)
ProxyHandler = Callable[[str, str, dict | None], tuple[int, str, str]]

PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|services)/([^/:]+):(\d+)/proxy/?(.*)$")
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


class FakeKube(LoopbackServer):
    def __init__(self) -> None:
        self.nodes: list[dict] = []
        self.pods: list[dict] = []
        self.objects: dict[str, dict] = {}
        """Path (``/apis/apps/v1/namespaces/<ns>/statefulsets/<name>`` ...) -> object."""
        self.proxies: dict[tuple[str, str, str, int], ProxyHandler] = {}
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
        super().__exit__(*exc)

    def put(self, path: str, obj: dict) -> None:
        self.objects[path] = obj

    def proxy(self, kind: str, namespace: str, name: str, port: int, handler: ProxyHandler) -> None:
        self.proxies[(kind, namespace, name, port)] = handler

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
                watched = re.match(r"^/api/v1/namespaces/([^/]+)/pods$", url.path)
                if method == "GET" and watched and (query.get("watch") or [""])[0].lower() == "true":
                    fake.log.append((method, self.path))
                    fake._watch(self, watched.group(1), (query.get("labelSelector") or [None])[0])
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                code, ctype, text = fake._route(method, self.path, body)
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
        self.vllm_counters = True
        self.stored = 0
        self.hit = 0
        self.local: set[str] = set()

    def __call__(self, method: str, path: str, body: dict | None) -> tuple[int, str, str]:
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
