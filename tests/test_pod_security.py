"""Every pod kvtiers renders meets the Pod Security level its namespace enforces (and the hardening docs/security.md
promises), checked with a Pod Security Standards checker (tests/pss.py)."""

from __future__ import annotations

import copy

import pytest

from tests import pss

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"}


def objects(synth) -> list[dict]:
    return [o for objs in synth.graph.workloads.chart_objects.values() for o in objs]


def pods(objs: list[dict]) -> list[tuple[str, str, dict]]:
    found = []
    for o in objs:
        if o["kind"] in WORKLOAD_KINDS:
            spec = o["spec"] if o["kind"] == "Pod" else o["spec"]["template"]["spec"]
            found.append((o["metadata"]["namespace"], f"{o['kind']}/{o['metadata']['name']}", spec))
    return found


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_rendered_pod_meets_its_namespace_level(env_name, request):
    objs = objects(request.getfixturevalue(f"{env_name}_synth"))
    enforce = {
        o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for o in objs
        if o["kind"] == "Namespace"
    }
    rendered = pods(objs)
    assert len(rendered) >= 5
    for namespace, name, spec in rendered:
        assert pss.meets(spec, enforce[namespace]), (name, enforce[namespace], pss.restricted_violations(spec))


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_levels_are_the_strictest_the_namespaces_pods_allow(env_name, request):
    objs = objects(request.getfixturevalue(f"{env_name}_synth"))
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objs if o["kind"] == "Namespace"}
    env = request.getfixturevalue(f"{env_name}_synth").graph.workloads.config
    has_operator = any(e.serving == "operator" for e in env.serving.endpoints)
    # Serving: engines meet baseline; the operator's own pods are unknown, so with them nothing is enforced.
    assert labels["serving"]["pod-security.kubernetes.io/enforce"] == ("privileged" if has_operator else "baseline")
    # Curvine: the CSI node plugin is privileged, and the driver's FUSE processes run inside it.
    assert labels["curvine"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for ns_labels in labels.values():
        assert ns_labels["pod-security.kubernetes.io/warn"] == "restricted"
        assert ns_labels["pod-security.kubernetes.io/audit"] == "restricted"
    levels = {name: pss.level(spec) for _, name, spec in pods(objs)}
    # Only the operator's own pods keep serving at privileged: every pod kvtiers renders there meets baseline.
    serving = [name for namespace, name, _ in pods(objs) if namespace == "serving"]
    assert serving and all(levels[name] in ("baseline", "restricted") for name in serving), serving
    assert levels["StatefulSet/curvine-master"] == "restricted"
    # Root (capabilities dropped): the L2 directories it creates must be writable by the root engines.
    assert levels["Deployment/curvine-csi-controller"] == "baseline"
    assert levels["DaemonSet/curvine-csi-node"] == "privileged"
    assert levels["DaemonSet/curvine-worker"] == "privileged"  # host network, hostPath
    for name, got in levels.items():
        if name.endswith("-router"):
            assert got == "restricted", name
        if name.endswith("-engine"):
            assert got == "baseline", name  # root, everything else restricted


def test_every_container_is_hardened_or_a_reasoned_exception(dev_synth, prod_synth):
    exceptions = {"csi-plugin@DaemonSet/curvine-csi-node"}  # privileged FUSE host (docs/security.md, exceptions table)
    for synth in (dev_synth, prod_synth):
        for _, name, spec in pods(objects(synth)):
            for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
                if f"{c['name']}@{name}" in exceptions:
                    continue
                ctx = c.get("securityContext", {})
                assert ctx.get("allowPrivilegeEscalation") is False, (name, c["name"])
                assert ctx.get("capabilities", {}).get("drop") == ["ALL"], (name, c["name"])
                assert ctx.get("readOnlyRootFilesystem") is True, (name, c["name"])
                assert ctx.get("seccompProfile") == {"type": "RuntimeDefault"}, (name, c["name"])


def test_tokens_are_mounted_only_where_the_api_is_called(dev_synth, prod_synth):
    callers = ("-router", "curvine-csi-controller", "curvine-csi-node")
    for synth in (dev_synth, prod_synth):
        for _, name, spec in pods(objects(synth)):
            expected = name.endswith(callers)
            assert spec.get("automountServiceAccountToken") is expected, name


def test_the_checker_catches_what_each_level_forbids():
    good = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    assert pss.level(good) == "restricted"
    root = copy.deepcopy(good)
    root["securityContext"]["runAsNonRoot"] = False
    assert pss.level(root) == "baseline"
    for mutate in (
        lambda s: s.update(hostNetwork=True),
        lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        lambda s: s["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
        lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert pss.level(bad) == "privileged"
