"""Where the L2 blocks the cross-pod check wrote actually landed: on the writer's node, or elsewhere.

Node-local placement is the design's point (each node's NVMe serves its own writes) and is decided by the master at
run time: its ``local`` worker policy picks the worker whose hostname equals the client's and otherwise falls back to
round-robin, silently. Only the cluster can say which one happened, so this check asks the leader master's web API
(``/api/browse``, ``/api/block_locations``, Curvine v0.4.1 ``curvine-master/src/master/router_handler.rs``) which
worker holds each block of the files written since the cross-pod check started, and compares it with the node IP of
the replica that wrote them. Other traffic on the same endpoint during the check can add files from other nodes:
run it on a quiet endpoint.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import quote

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from kvtiers.cli.verify import proxy
from kvtiers.cli.verify.crosspod import ready_by_node
from kvtiers.cli.verify.k8s import master_overviews
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names

NAME = "L2 writes land on the writer's node"
CLOCK_SKEW_MS = 60_000
"""Files are selected by the master's mtime (milliseconds): allow this much clock difference to this machine."""
MAX_ENTRIES = 5_000
"""Bound on the directory walk (the L2 tree of one environment)."""
MAX_FILES = 20


class _Master:
    def __init__(self, api: ApiClient, env: Environment, pod: str) -> None:
        self.api, self.env, self.pod = api, env, pod

    def get(self, path: str, curvine_path: str):
        response = proxy.request(
            self.api,
            "pods",
            self.env.curvine.namespace,
            self.pod,
            self.env.curvine.ports.master_web,
            f"{path}?path={quote(curvine_path, safe='/')}",
            timeout=15,
        )
        if not response.ok:
            raise RuntimeError(f"{self.pod} {path} {curvine_path}: HTTP {response.status}")
        return response.json()


def recent_files(master: _Master, root: str, since_ms: int) -> list[dict]:
    """Files below ``root`` modified at or after ``since_ms``, newest first (breadth-first, bounded)."""
    queue, found, seen = [root], [], 0
    while queue and seen < MAX_ENTRIES:
        for status in master.get(names.CURVINE_MASTER_BROWSE_PATH, queue.pop(0)):
            seen += 1
            if status.get("is_dir"):
                queue.append(status["path"])
            elif int(status.get("mtime", 0)) >= since_ms:
                found.append(status)
    return sorted(found, key=lambda s: -int(s.get("mtime", 0)))[:MAX_FILES]


def block_hosts(master: _Master, path: str) -> list[str]:
    """The hostname of the first worker holding each block of ``path`` (the one the writer wrote to)."""
    blocks = master.get(names.CURVINE_MASTER_BLOCKS_PATH, path).get("block_locs", [])
    return [b["locs"][0]["hostname"] if b.get("locs") else "(no worker)" for b in blocks]


def check_l2_placement(
    core: CoreV1Api, apps: AppsV1Api, api: ApiClient, env: Environment, endpoint: Endpoint, since_s: float
) -> CheckResult:
    """``since_s``: when the cross-pod check started (this machine's clock, seconds since the epoch)."""
    area = f"cross-pod:{endpoint.name}"
    ready, by_node = ready_by_node(core, env, endpoint)
    if not by_node:
        return failed(area, NAME, "no Ready engine pod", "the cross-pod check must run first")
    writer = next(p for p in ready if p.metadata.name == next(iter(by_node.values())))
    node_ip = writer.status.host_ip
    sts = apps.read_namespaced_stateful_set(names.CURVINE_MASTER, env.curvine.namespace)
    bodies, _ = master_overviews(core, api, env, sts.spec.selector.match_labels)
    leader = next((pod for pod, b in bodies.items() if b["master_state"] == names.CURVINE_LEADER_STATE), None)
    if leader is None:
        return failed(area, NAME, "no Curvine leader answered /api/overview", "the 'master leader' check")
    master = _Master(api, env, leader)
    try:
        files = recent_files(master, env.curvine.fs_path, int(since_s * 1000) - CLOCK_SKEW_MS)
        hosts = Counter(h for f in files for h in block_hosts(master, f["path"]))
    except (proxy.ProxyError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        return failed(area, NAME, str(exc), f"the leader's web port {env.curvine.ports.master_web} (/api/browse)")
    where = f"{writer.metadata.name} on {writer.spec.node_name} ({node_ip})"
    if not hosts:
        return failed(
            area,
            NAME,
            f"no block written below {env.curvine.fs_path} since the check started",
            ("the cross-pod check's store step; LMCache remote_url under the L2 mount"),
        )
    spread = ", ".join(f"{host}: {n}" for host, n in hosts.most_common())
    detail = f"{sum(hosts.values())} block(s) of {len(files)} file(s) written by {where}: {spread}"
    if set(hosts) == {node_ip}:
        return passed(area, NAME, detail)
    return failed(
        area,
        NAME,
        detail,
        (
            "CURVINE_CLIENT_HOSTNAME of the CSI node plugin and CURVINE_WORKER_HOSTNAME of the worker must both be the "
            "node IP (status.hostIP); a Curvine worker must run on the writer's node with free space (the master's "
            "local policy falls back to round-robin otherwise); other writers during the check also add blocks"
        ),
    )
