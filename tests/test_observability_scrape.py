"""The managed collector's scrape configuration, applied to the pods the charts render (and the operator pod model):
Prometheus's pod discovery labels, then each job's relabelling, as Prometheus applies them."""

from __future__ import annotations

import re

import yaml

from kvtiers.config.model import operator_endpoint
from kvtiers.k8s_charts.serving.endpoint import PROMETHEUS_MULTIPROC_DIR, PROMETHEUS_MULTIPROC_ENV
from kvtiers.observability.scrape import meta_label, scrape_configuration
from tests.fakes.operator_pod import operator_pod


def discovered(namespace: str, name: str, labels: dict, containers: list[dict]) -> list[dict]:
    """One target per declared container port, with the ``__meta_kubernetes_*`` labels pod discovery sets."""
    base = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_node_name": "node-1",
        **{meta_label(k): v for k, v in labels.items()},
    }
    return [
        {**base, "__meta_kubernetes_pod_container_port_number": str(p["containerPort"])}
        for c in containers
        for p in c.get("ports", ())
    ]


def relabel(target: dict, rules: list[dict]) -> dict | None:
    labels = dict(target)
    for rule in rules:
        value = ";".join(labels.get(s, "") for s in rule.get("source_labels", []))
        regex = re.compile(f"^(?:{rule.get('regex', '(.*)')})$")
        action = rule.get("action", "replace")
        if action == "keep":
            if not regex.match(value):
                return None
            continue
        match = regex.match(value)
        if match:
            labels[rule["target_label"]] = match.expand(rule.get("replacement", "$1").replace("$1", r"\g<1>"))
    return labels


def pods(env, objects, kubectl=None):
    out = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            template = obj["spec"]["template"]
            out.append(
                (
                    obj["metadata"]["namespace"],
                    obj["metadata"]["name"],
                    template["metadata"]["labels"],
                    template["spec"]["containers"],
                )
            )
    for endpoint in env.serving.endpoints:
        if endpoint.serving == "operator":
            pod = operator_pod(operator_endpoint(env, endpoint.name))
            out.append(
                (
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    pod["metadata"]["labels"],
                    pod["spec"]["containers"],
                )
            )
    return out


def scraped(env, objects) -> list[dict]:
    config = yaml.safe_load(scrape_configuration(env))
    targets = []
    for job in config["scrape_configs"]:
        (sd,) = job["kubernetes_sd_configs"]
        for namespace, name, labels, containers in pods(env, objects):
            if namespace not in sd["namespaces"]["names"]:
                continue
            for target in discovered(namespace, name, labels, containers):
                kept = relabel(target, job["relabel_configs"])
                if kept is not None:
                    targets.append(
                        {
                            "job": job["job_name"],
                            **{k: v for k, v in kept.items() if not k.startswith("__")},
                            "port": target["__meta_kubernetes_pod_container_port_number"],
                        }
                    )
    return targets


def test_every_endpoint_curvine_and_router_is_scraped_with_its_labels(prod_env_objects):
    env, objects = prod_env_objects
    targets = scraped(env, objects)
    engines = {t["endpoint"]: t for t in targets if t["component"] == "engine"}
    assert set(engines) == {e.name for e in env.serving.endpoints}
    assert all(t["port"] == "8000" for t in engines.values())
    routers = {t["endpoint"] for t in targets if t["component"] == "router"}
    assert routers == {e.name for e in env.serving.endpoints if e.serving == "self_managed"}
    assert {t["pod"] for t in targets if t["component"] == "curvine-master"} == {"curvine-master"}
    assert {(t["component"], t["port"]) for t in targets if t["component"].startswith("curvine")} == {
        ("curvine-master", str(env.curvine.ports.master_web)),
        ("curvine-worker", str(env.curvine.ports.worker_web)),
    }
    # no other port of these pods (LMCache worker ports, Curvine RPC) becomes a target
    assert len(targets) == len({(t["job"], t["pod"]) for t in targets})


def test_engines_share_one_prometheus_multiprocess_directory(prod_env_objects):
    _env, objects = prod_env_objects
    for obj in objects:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith("-engine"):
            spec = obj["spec"]["template"]["spec"]
            (engine,) = [c for c in spec["containers"] if c["name"] == "vllm"]
            assert {"name": PROMETHEUS_MULTIPROC_ENV, "value": PROMETHEUS_MULTIPROC_DIR} in engine["env"]
            mount = next(m for m in engine["volumeMounts"] if m["mountPath"] == PROMETHEUS_MULTIPROC_DIR)
            assert next(v for v in spec["volumes"] if v["name"] == mount["name"])["emptyDir"]


COUNT_ONCE = """
import sys
from prometheus_client import CollectorRegistry, Counter, multiprocess
Counter("kvtiers_probe", "requests").inc(float(sys.argv[1]))
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(registry.get_sample_value("kvtiers_probe_total"))
"""
"""One engine run as prometheus_client (the engine image's version, in .venv-engine) sees it: count, then read the
multiprocess directory as vLLM's /metrics does."""


def test_a_restarted_engine_container_starts_from_an_empty_metrics_directory(prod_env_objects, tmp_path):
    # The emptyDir outlives a container restart and vLLM never wipes a directory the user sets: without a wipe at
    # start, the counters of the dead run's processes (same PIDs in the new PID namespace) carry on.
    import os
    import subprocess

    import pytest

    from tests.test_engine_drain import PYTHON

    if not PYTHON.exists():
        pytest.skip("no .venv-engine (make test installs it)")
    _env, objects = prod_env_objects
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-engine"))
    (engine,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    # The image's vllm binary stands in as a script that counts 1 and prints what /metrics would serve.
    vllm = tmp_path / "vllm"
    vllm.write_text(f"#!/bin/sh\nexec {PYTHON} -c '{COUNT_ONCE}' 1\n")
    vllm.chmod(0o755)
    metrics = tmp_path / "prometheus-multiproc"
    metrics.mkdir()
    env = {**os.environ, PROMETHEUS_MULTIPROC_ENV: str(metrics)}
    # The run before the restart counted 5, as PID 1 of its container.
    before = subprocess.run([str(PYTHON), "-c", COUNT_ONCE, "5"], env=env, capture_output=True, text=True, check=True)
    assert float(before.stdout) == 5.0 and list(metrics.glob("*.db"))
    command = [str(vllm) if part.rsplit("/", 1)[-1] == "vllm" else part for part in engine["command"]]
    after = subprocess.run([*command, *engine["args"]], env=env, capture_output=True, text=True, timeout=60)
    assert after.returncode == 0, after.stderr
    assert float(after.stdout) == 1.0
