"""Each endpoint sees only its own L2 directory: every rendered mount of the L2 claim, in both example environments,
is checked against the rule (issue 25 item 2).

The rule, stated without the code under test's naming: every pod that mounts the claim is either the janitor, which
mounts its root (it evicts across all endpoints), or a serving pod, which mounts one sub-directory (``subPath``, no
``..``) and points LMCache's ``remote_url`` inside that mount. Two different endpoints' sub-directories are disjoint
(neither is a path prefix of the other). The operator endpoints' pods are the Kyverno mutation's patch.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kvtiers.config import model
from kvtiers.k8s_charts import names

ENDPOINT_LABEL = "kvtiers.io/endpoint"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


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


def _pod_specs(node: Any, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every pod-shaped dict anywhere in an object (a Deployment's template, a CronJob's job template, a Pod, a
    Kyverno patch, an InferenceEndpointConfig's ``spec.kubernetes``): whatever holds volumes or containers."""
    if isinstance(node, dict):
        if "volumes" in node or any(key in node for key in CONTAINER_LISTS):
            yield path, node
        for key, value in node.items():
            yield from _pod_specs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _pod_specs(value, f"{path}[{i}]")


def _l2_pods(objs: list[dict], claim: str, janitor: tuple[str, str]) -> list[dict[str, Any]]:
    """Every container (of any kind, in any pod-shaped part of any object) with a volume of ``claim``, or of the
    Curvine CSI driver directly: who it is, its mounts of that volume and the remote URL its LMCache writes to.
    ``janitor`` is the (kind, name) of the one workload allowed the claim's root."""
    config_urls = _remote_urls_by_config_map(objs)
    found = []
    for o in objs:
        meta = o["metadata"]
        labels = ((o.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
        owner = labels.get(ENDPOINT_LABEL, meta["name"])
        is_janitor = (o["kind"], meta["name"]) == janitor
        for path, spec in _pod_specs(o):
            l2_volumes = {
                v["name"]
                for v in spec.get("volumes", [])
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                or "curvine" in (v.get("csi") or {}).get("driver", "")
            }
            if not l2_volumes:
                continue
            containers = [c for key in CONTAINER_LISTS for c in spec.get(key, [])]
            config_volumes = {v["name"]: v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v}
            who = f"{o['kind']}/{meta['name']}{path}"
            if not containers:  # volumes alone: any container added later could mount them whole
                found.append(
                    {"who": who, "owner": owner, "janitor": is_janitor, "mounts": [{"mountPath": "?"}], "url": None}
                )
            for c in containers:
                mounts = [m for m in c.get("volumeMounts", []) if m["name"] in l2_volumes]
                if not mounts:
                    continue
                url = next((e.get("value") for e in c.get("env", []) if e["name"] == "LMCACHE_REMOTE_URL"), None)
                for m in c.get("volumeMounts", []):
                    url = url or config_urls.get(config_volumes.get(m["name"], ""))
                found.append(
                    {"who": f"{who}/{c['name']}", "owner": owner, "janitor": is_janitor, "mounts": mounts, "url": url}
                )
    return found


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _violations(pods: list[dict[str, Any]], share_groups: dict[str, str] | None = None) -> list[str]:
    """``share_groups``: endpoint → the ``l2_share_group`` it joined; members of one group may see one directory."""
    groups = share_groups or {}
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
                    same_group = a in groups and groups.get(a) == groups.get(b)
                    if (_inside(da, db) or _inside(db, da)) and not same_group:
                        problems.append(f"{a} ({da}) and {b} ({db}) see each other's L2 directory")
    return problems


JANITOR = ("Deployment", names.CURVINE_JANITOR)


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_rendered_l2_mount_sees_only_its_endpoint(env_name, request):
    synth = request.getfixturevalue(f"{env_name}_synth")
    env = synth.graph.workloads.config
    objs = [o for objects in synth.graph.workloads.chart_objects.values() for o in objects]
    pods = _l2_pods(objs, env.serving.l2_claim_name, JANITOR)
    groups = {e.name: e.l2_share_group for e in env.serving.endpoints if e.l2_share_group is not None}
    assert _violations(pods, groups) == []
    # Not vacuous: the janitor and every endpoint with the L2 on are among the pods checked.
    assert [p["who"] for p in pods if p["janitor"]], "no janitor mounts the L2"
    l2_endpoints = {s.name for s in model.sizing(env).endpoints if s.l2_enabled}
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
    shared = [pod("a", "shared-g/x"), pod("b", "shared-g/x")]
    assert _violations(shared) != [] and _violations(shared, {"a": "g", "b": "g"}) == []


def test_the_walk_finds_init_containers_cron_jobs_and_impostors_named_janitor(dev_synth):
    """The rendered objects plus three planted violations: each is found (the walk is not limited to the kinds and
    container lists kvtiers renders today)."""
    env = dev_synth.graph.workloads.config
    claim = env.serving.l2_claim_name
    objs = copy.deepcopy([o for objects in dev_synth.graph.workloads.chart_objects.values() for o in objects])
    engine = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-engine"))
    spec = engine["spec"]["template"]["spec"]
    l2_volume = next(
        v["name"] for v in spec["volumes"] if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
    )
    spec.setdefault("initContainers", []).append(
        {"name": "spy", "volumeMounts": [{"name": l2_volume, "mountPath": "/all"}]}
    )
    cron_pod = {
        "volumes": [{"name": "l2", "persistentVolumeClaim": {"claimName": claim}}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "l2", "mountPath": "/l2"}]}],
    }
    objs.append(
        {
            "kind": "CronJob",
            "metadata": {"name": "sweep"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": cron_pod}}}},
        }
    )
    objs.append(
        {
            "kind": "Deployment",
            "metadata": {"name": "janitor-lookalike"},
            "spec": {"template": {"metadata": {}, "spec": copy.deepcopy(cron_pod)}},
        }
    )
    problems = _violations(_l2_pods(objs, claim, JANITOR))
    assert any("/spy" in p and "whole L2" in p for p in problems), problems
    assert any(p.startswith("CronJob/sweep") for p in problems), problems
    assert any(p.startswith("Deployment/janitor-lookalike") for p in problems), problems
