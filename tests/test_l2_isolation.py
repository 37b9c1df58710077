"""Each endpoint sees only its own L2 directory: every rendered mount of the L2 claim, in both example environments,
is checked against the rule (issue 25 item 2).

The rule, stated without the code under test's naming: every pod that mounts the claim is either the janitor, which
mounts its root (it evicts across all endpoints), or a serving pod, which mounts one sub-directory (``subPath``, no
``..``) and points LMCache's ``remote_url`` inside that mount. Two different endpoints' sub-directories are disjoint
(neither is a path prefix of the other). The operator endpoints' pods are the Kyverno mutation's patch.
"""

from __future__ import annotations

import posixpath
from typing import Any

import pytest
import yaml

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
ENDPOINT_LABEL = "kvtiers.io/endpoint"


def _remote_urls_by_config_map(objs: list[dict]) -> dict[str, str]:
    urls = {}
    for o in objs:
        if o["kind"] != "ConfigMap":
            continue
        for text in (o.get("data") or {}).values():
            try:
                parsed = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if isinstance(parsed, dict) and "remote_url" in parsed:
                urls[o["metadata"]["name"]] = parsed["remote_url"]
    return urls


def _l2_pods(objs: list[dict], claim: str) -> list[dict[str, Any]]:
    """Every pod (template or Kyverno patch) with a volume of ``claim``: who it is, and each container's mounts of
    that volume with the remote URL the container's LMCache writes to."""
    config_urls = _remote_urls_by_config_map(objs)
    found = []

    def record(who: str, owner: str, janitor: bool, spec: dict) -> None:
        l2_volumes = {
            v["name"]
            for v in spec.get("volumes", [])
            if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
        }
        if not l2_volumes:
            return
        config_volumes = {v["name"]: v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v}
        for c in spec["containers"]:
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] in l2_volumes]
            if not mounts:
                continue
            url = next((e.get("value") for e in c.get("env", []) if e["name"] == "LMCACHE_REMOTE_URL"), None)
            for m in c.get("volumeMounts", []):
                url = url or config_urls.get(config_volumes.get(m["name"], ""))
            found.append(
                {"who": f"{who}/{c['name']}", "owner": owner, "janitor": janitor, "mounts": mounts, "url": url}
            )

    for o in objs:
        meta = o["metadata"]
        if o["kind"] in WORKLOAD_KINDS:
            template = o["spec"]["template"]
            labels = template["metadata"].get("labels", {})
            janitor = "janitor" in meta["name"]
            owner = labels.get(ENDPOINT_LABEL, meta["name"])
            record(f"{o['kind']}/{meta['name']}", owner, janitor, template["spec"])
        elif o["kind"] == "Policy" and o["apiVersion"].startswith("kyverno.io/"):
            for rule in o["spec"]["rules"]:
                for each in (rule.get("mutate") or {}).get("foreach", []):
                    record(f"Policy/{meta['name']}", meta["name"], False, each["patchStrategicMerge"]["spec"])
    return found


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _violations(pods: list[dict[str, Any]]) -> list[str]:
    problems = []
    directories: dict[str, set[str]] = {}
    for pod in pods:
        for m in pod["mounts"]:
            sub = m.get("subPath", "")
            if pod["janitor"]:
                if sub:
                    problems.append(f"{pod['who']}: the janitor mounts {sub!r}, not the root")
                continue
            if not sub:
                problems.append(f"{pod['who']}: mounts the whole L2 (no subPath)")
                continue
            segments = sub.split("/")
            if sub.startswith("/") or any(s in ("", ".", "..") for s in segments):
                problems.append(f"{pod['who']}: subPath {sub!r} is not a plain relative path")
            directories.setdefault(pod["owner"], set()).add(posixpath.normpath(sub))
            url = pod["url"]
            if url is None or not _inside(url.split("localhost:0", 1)[-1].rstrip("/"), m["mountPath"]):
                problems.append(f"{pod['who']}: LMCache's remote_url {url!r} is outside its mount {m['mountPath']}")
    owners = sorted(directories)
    for i, a in enumerate(owners):
        for b in owners[i + 1 :]:
            for da in directories[a]:
                for db in directories[b]:
                    if _inside(da, db) or _inside(db, da):
                        problems.append(f"{a} ({da}) and {b} ({db}) see each other's L2 directory")
    return problems


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_rendered_l2_mount_sees_only_its_endpoint(env_name, request):
    synth = request.getfixturevalue(f"{env_name}_synth")
    env = synth.graph.workloads.config
    objs = [o for objects in synth.graph.workloads.chart_objects.values() for o in objects]
    pods = _l2_pods(objs, env.serving.l2_claim_name)
    assert _violations(pods) == []
    # Not vacuous: the janitor and every endpoint with the L2 on are among the pods checked.
    assert [p["who"] for p in pods if p["janitor"]], "no janitor mounts the L2"
    l2_endpoints = {s.name for s in env.sizing.endpoints if s.l2_enabled}
    serving_pods = [p for p in pods if not p["janitor"]]
    assert len(serving_pods) >= len(l2_endpoints) >= 1
    self_managed = {e.name for e in env.serving.endpoints if e.serving == "self_managed"} & l2_endpoints
    assert self_managed <= {p["owner"] for p in serving_pods}


def test_the_rule_catches_a_root_mount_and_overlapping_directories():
    def pod(owner: str, sub: str, mount: str = "/mnt/l2/x", url: str = "fs://localhost:0/mnt/l2/x/") -> dict:
        m = {"name": "l2", "mountPath": mount} | ({"subPath": sub} if sub else {})
        return {"who": owner, "owner": owner, "janitor": False, "mounts": [m], "url": url}

    assert _violations([pod("a", "")]) == ["a: mounts the whole L2 (no subPath)"]
    assert _violations([pod("a", "endpoint-a/x"), pod("b", "endpoint-a")]) != []
    assert _violations([pod("a", "endpoint-a/../b")]) != []
    assert _violations([pod("a", "endpoint-a/x", url="fs://localhost:0/mnt/l2/")]) != []
    assert _violations([pod("a", "endpoint-a/x"), pod("b", "endpoint-b/x")]) == []
