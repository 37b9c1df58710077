"""The Curvine L2 admission policy, evaluated against the modelled operator pod with real engines: kubectl's kustomize
for the strategic-merge mutation, cel-python for the validation and the webhook's match conditions, JMESPath for the
foreach preconditions (tests/fakes/kyverno.py). Plus Kyverno's own settings: restricted to Pods, fail-closed for the
endpoint's pods only, highly available, and ready before the endpoint exists."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts.hyperpod_operator import (
    L2_GUARD_DIR,
    L2_GUARD_VOLUME,
    L2_VOLUME,
    MODEL_MOUNT,
    contract,
    policy,
    policy_name,
)
from kvtiers.k8s_charts.hyperpod_operator.policy import METRICS_VOLUME
from kvtiers.k8s_charts.l2 import L2Mount
from kvtiers.k8s_charts.serving.endpoint import PROMETHEUS_MULTIPROC_DIR
from tests.conftest import CONFIG_DIR
from tests.fakes import kyverno
from tests.fakes.operator_pod import model_container_name, operator_pod


@pytest.fixture(scope="module")
def prod():
    return load_environment(CONFIG_DIR / "prod.yaml")


@pytest.fixture(scope="module")
def props(prod):
    return model.operator_endpoint(prod, "qwen2-7b-chat")


@pytest.fixture(scope="module")
def l2_policy(props):
    return policy(props)


def container(pod: dict, name: str) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def assert_has_l2(pod: dict, name: str, l2: L2Mount, remote_url: str) -> None:
    c = container(pod, name)
    # only the endpoint's own directory of the claim, where its LMCache writes
    assert {"name": L2_VOLUME, "mountPath": l2.mount_path, "subPath": l2.sub_path} in c["volumeMounts"]
    assert remote_url == f"fs://localhost:0{l2.mount_path}/"
    assert {"name": "LMCACHE_REMOTE_URL", "value": remote_url} in c["env"]
    assert {"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": l2.claim_name}} in pod["spec"]["volumes"]
    # the L2 guard vLLM loads as its KV connector: mounted where the worker's PYTHONPATH points
    guard = next(v for v in pod["spec"]["volumes"] if v["name"] == L2_GUARD_VOLUME)
    mount = next(m for m in c["volumeMounts"] if m["name"] == L2_GUARD_VOLUME)
    assert {"name": "PYTHONPATH", "value": mount["mountPath"]} in c["env"]
    assert guard["configMap"]["name"].endswith("-l2-guard")


ADDED_VOLUMES = {L2_VOLUME, L2_GUARD_VOLUME, METRICS_VOLUME}


def test_the_operator_pod_is_admitted_with_the_l2_mounted(kubectl, l2_policy, props):
    pod = operator_pod(props)
    admitted = kyverno.admit(kubectl, l2_policy, pod)
    assert admitted.reviewed
    assert_has_l2(admitted.pod, model_container_name(props), props.l2, props.lmcache.remote_url)
    # every volume and mount the operator set is still there; the sidecar is untouched
    assert [v for v in admitted.pod["spec"]["volumes"] if v["name"] not in ADDED_VOLUMES] == pod["spec"]["volumes"]
    assert container(admitted.pod, "sidecar") == container(pod, "sidecar")
    model = container(admitted.pod, model_container_name(props))
    added = [m for m in model["volumeMounts"] if m["name"] not in ADDED_VOLUMES]
    assert added == container(pod, model["name"])["volumeMounts"]


@pytest.mark.parametrize(
    "extra",
    [
        {"name": "scratch", "emptyDir": {}},
        {"name": "hf-token", "secret": {"secretName": "hf"}},
        {"name": "host", "hostPath": {"path": "/opt/dlami/nvme", "type": "Directory"}},
    ],
)
def test_other_volumes_do_not_deny_the_pod(kubectl, l2_policy, props, extra):
    # The old pattern put a single map under spec.volumes: Kyverno checks every element against it.
    admitted = kyverno.admit(kubectl, l2_policy, operator_pod(props, extra_volumes=(extra,)))
    assert extra in admitted.pod["spec"]["volumes"]
    assert_has_l2(admitted.pod, model_container_name(props), props.l2, props.lmcache.remote_url)


@pytest.mark.parametrize("name", ["worker", "vllm", "model-server", "qwen2-7b-chat-938ce183"])
def test_a_renamed_model_container_still_gets_the_l2(kubectl, l2_policy, props, name):
    admitted = kyverno.admit(kubectl, l2_policy, operator_pod(props, container_name=name))
    assert_has_l2(admitted.pod, name, props.l2, props.lmcache.remote_url)


@pytest.mark.parametrize(
    "image",
    [
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/mirror/lmcache/vllm-openai:v0.3.7",
        "lmcache/vllm-openai@sha256:" + "0" * 64,
        "docker.io/lmcache/vllm-openai:v0.3.7",
    ],
)
def test_a_mirrored_or_pinned_image_still_gets_the_l2(kubectl, l2_policy, props, image):
    admitted = kyverno.admit(kubectl, l2_policy, operator_pod(props, image=image))
    assert_has_l2(admitted.pod, model_container_name(props), props.l2, props.lmcache.remote_url)


def test_a_pod_the_mutation_misses_is_denied(kubectl, l2_policy, props):
    # The operator mounts the weights elsewhere: no container is recognised, nothing is mounted -> refused.
    with pytest.raises(kyverno.Denied, match="matched nothing"):
        kyverno.admit(kubectl, l2_policy, operator_pod(props, model_mount="/models"))


def _lmcache_env(props) -> dict[str, str]:
    return {e["name"]: e["value"] for e in props.worker_env if e["name"].startswith("LMCACHE_")}


@pytest.mark.parametrize(
    "strip",
    [
        "url",
        "url-replaced",
        # aws/sagemaker-hyperpod-cli#431: operator v3.2.0 drops the worker's LMCACHE_* and sets its own URL.
        "all-lmcache",
    ],
)
def test_a_stripped_or_overridden_lmcache_env_is_restored_at_admission(kubectl, l2_policy, props, strip):
    pod = operator_pod(props)
    model = container(pod, model_container_name(props))
    if strip == "url":
        model["env"] = [e for e in model["env"] if e["name"] != "LMCACHE_REMOTE_URL"]
    elif strip == "url-replaced":
        model["env"] = [
            {**e, "value": "redis://cache:6379"} if e["name"] == "LMCACHE_REMOTE_URL" else e for e in model["env"]
        ]
    else:
        model["env"] = [e for e in model["env"] if not e["name"].startswith("LMCACHE_")] + [
            {"name": "LMCACHE_REMOTE_URL", "value": "sagemaker-hyperpod://$(NODE_IP):9200"}
        ]
    admitted = kyverno.admit(kubectl, l2_policy, pod).pod
    env = {e["name"]: e.get("value") for e in container(admitted, model_container_name(props))["env"]}
    assert {k: env.get(k) for k in _lmcache_env(props)} == _lmcache_env(props)


def test_a_duplicated_l2_url_is_denied(kubectl, l2_policy, props):
    # The operator appends its own URL after ours: Kubernetes takes the last one, the merge cannot say which.
    pod = operator_pod(props)
    container(pod, model_container_name(props))["env"].append(
        {"name": "LMCACHE_REMOTE_URL", "value": "lm://operator-cache:65432"}
    )
    with pytest.raises(kyverno.Denied, match="LMCACHE_REMOTE_URL"):
        kyverno.admit(kubectl, l2_policy, pod)


def test_the_check_refuses_a_pod_without_the_lmcache_settings(l2_policy, props):
    pod = operator_pod(props)
    model = container(pod, model_container_name(props))
    model["env"] = [e for e in model["env"] if e["name"] != "LMCACHE_MAX_LOCAL_CPU_SIZE"]
    assert any("LMCACHE_MAX_LOCAL_CPU_SIZE" in m for m in kyverno.validate(l2_policy, pod))


def test_without_the_policy_the_pod_starts_without_its_l2(kubectl, props):
    # Why the endpoint waits for the policy to be ready: a pod admitted without it has no L2 at all.
    admitted = kyverno.admit(kubectl, None, operator_pod(props))
    assert not admitted.reviewed
    assert all(v["name"] != L2_VOLUME for v in admitted.pod["spec"]["volumes"])


def test_the_check_alone_refuses_an_unmutated_pod(l2_policy, props):
    messages = kyverno.validate(l2_policy, operator_pod(props))
    assert any(f"no volume {L2_VOLUME}" in m for m in messages)
    assert any("does not mount" in m for m in messages)
    assert any("does not mount the L2 guard" in m for m in messages)


def test_only_this_endpoints_pods_reach_the_fail_closed_webhook(kubectl, l2_policy, props, prod):
    pod = operator_pod(props)
    assert kyverno.webhook_receives(l2_policy, pod)
    other_endpoint = copy.deepcopy(pod)
    other_endpoint["metadata"]["labels"]["app"] = "qwen2-7b-chat-00000000"
    other_namespace = copy.deepcopy(pod)
    other_namespace["metadata"]["namespace"] = prod.curvine.namespace
    unlabelled = copy.deepcopy(pod)
    del unlabelled["metadata"]["labels"]
    curvine = {
        "metadata": {
            "name": "curvine-worker-x",
            "namespace": prod.curvine.namespace,
            "labels": {"app.kubernetes.io/name": "curvine"},
        },
        "spec": {"containers": []},
    }
    for other in (other_endpoint, other_namespace, unlabelled, curvine):
        assert not kyverno.webhook_receives(l2_policy, other)
    # deletes (object is null) and updates never reach it
    assert not kyverno.webhook_receives(l2_policy, None, "DELETE", props.namespace)
    assert not kyverno.webhook_receives(l2_policy, pod, "UPDATE")
    # and a pod that does not reach the webhook is admitted unchanged
    assert kyverno.admit(kubectl, l2_policy, other_endpoint).pod == other_endpoint


def test_the_policy_is_restricted_to_pods_and_fail_closed_only_through_its_own_webhook(l2_policy):
    assert l2_policy["metadata"]["annotations"] == {contract.AUTOGEN_ANNOTATION: "none"}
    spec = l2_policy["spec"]
    assert "failurePolicy" not in spec  # deprecated; it put the policy on Kyverno's shared fail webhook
    assert spec["webhookConfiguration"]["failurePolicy"] == "Fail"
    assert spec["webhookConfiguration"]["matchConditions"]  # the per-policy webhook needs match conditions
    for rule in spec["rules"]:
        for block in rule["match"]["any"]:
            assert block["resources"]["kinds"] == ["Pod"]
    validate = next(r for r in spec["rules"] if "validate" in r)["validate"]
    assert "pattern" not in validate and validate["cel"]["expressions"]


def test_the_mutation_has_no_anchors_and_is_keyed_by_container_name(l2_policy):
    mutate = next(r for r in l2_policy["spec"]["rules"] if "mutate" in r)["mutate"]
    text = json.dumps(mutate)
    assert "(image)" not in text and '"(' not in text and "+(" not in text
    (each,) = [e for e in mutate["foreach"] if "patchStrategicMerge" in e]
    containers = each["patchStrategicMerge"]["spec"]["containers"]
    assert containers == [
        {
            "name": "{{ element.name }}",
            "env": containers[0]["env"],
            "volumeMounts": [
                {
                    "name": L2_VOLUME,
                    "mountPath": patched_mount_path(l2_policy),
                    "subPath": containers[0]["volumeMounts"][0]["subPath"],
                },
                {"name": L2_GUARD_VOLUME, "mountPath": L2_GUARD_DIR, "readOnly": True},
                {"name": METRICS_VOLUME, "mountPath": PROMETHEUS_MULTIPROC_DIR},
            ],
        }
    ]
    names = {e["name"] for e in containers[0]["env"]}
    assert all(n.startswith("LMCACHE_") for n in names - {"PYTHONPATH", "POD_NAME", "PROMETHEUS_MULTIPROC_DIR"})
    assert {"PYTHONPATH", "PROMETHEUS_MULTIPROC_DIR"} <= names
    assert MODEL_MOUNT in each["preconditions"]["all"][0]["key"]


def patched_mount_path(l2_policy) -> str:
    mutate = next(r for r in l2_policy["spec"]["rules"] if "mutate" in r)["mutate"]
    return mutate["foreach"][0]["patchStrategicMerge"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]


def test_the_policy_takes_its_l2_values_from_l2settings(l2_policy, props, prod):
    l2 = model.l2_mount(prod, model.endpoint(prod, props.name))
    assert props.l2 == l2 and l2.claim_name == prod.serving.l2_claim_name
    assert patched_mount_path(l2_policy) == l2.mount_path
    assert l2.mount_path.startswith(prod.serving.l2_mount_path + "/endpoint-qwen2-7b-chat/")
    text = json.dumps(l2_policy)
    assert props.lmcache.remote_url in text and l2.claim_name in text


def _with_root_mount(pod: dict, *, init: bool = False, volume: str = L2_VOLUME) -> dict:
    """The operator pod with a container that mounts the L2 claim's root (another endpoint's chunks in reach)."""
    pod = copy.deepcopy(pod)
    spy = {"name": "spy", "image": "busybox", "volumeMounts": [{"name": volume, "mountPath": "/all"}]}
    pod["spec"].setdefault("initContainers" if init else "containers", []).append(spy)
    if volume != L2_VOLUME:
        pod["spec"]["volumes"].append({"name": volume, "persistentVolumeClaim": {"claimName": "curvine-l2"}})
    return pod


@pytest.mark.parametrize(
    "change",
    [
        lambda pod: _with_root_mount(pod),
        lambda pod: _with_root_mount(pod, init=True),
        lambda pod: _with_root_mount(pod, volume="other"),
    ],
    ids=["container", "init-container", "second-volume"],
)
def test_a_pod_that_mounts_more_of_the_l2_than_its_directory_is_denied(kubectl, l2_policy, props, change):
    with pytest.raises(kyverno.Denied, match="beyond the endpoint's directory|other than"):
        kyverno.admit(kubectl, l2_policy, change(operator_pod(props)))


def test_the_helper_refuses_anchors(kubectl, l2_policy, props):
    anchored = copy.deepcopy(l2_policy)
    each = next(r for r in anchored["spec"]["rules"] if "mutate" in r)["mutate"]["foreach"][0]
    each["patchStrategicMerge"]["spec"]["containers"][0] = {"(image)": "x", "volumeMounts": []}
    with pytest.raises(NotImplementedError, match="anchor"):
        kyverno.admit(kubectl, anchored, operator_pod(props))


# --------------------------------------------------------------------------------------------- readiness


def _ready_value(kubectl, status: str, path: str) -> str:
    obj = {
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": {"name": "p", "namespace": "serving"},
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": "x", "message": "x"}]},
    }
    out = subprocess.run(
        [str(kubectl), "annotate", "--local", "-f", "-", "kvtiers.io/probe=1", "-o", f"jsonpath={{{path}}}"],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def test_the_readiness_path_is_empty_until_kyverno_reports_ready(kubectl):
    # CDK's object-value handler returns as soon as kubectl prints anything: the value must be empty while pending.
    assert _ready_value(kubectl, "False", contract.READY_JSONPATH) == ""
    assert _ready_value(kubectl, "True", contract.READY_JSONPATH) == "Ready"
    assert _ready_value(kubectl, "False", '.status.conditions[?(@.type=="Ready")].status') == "False"


def test_kubectls_jsonpath_cannot_match_the_ready_type_and_its_status_together(kubectl):
    # The object-value handler waits for any output, so the wait cannot print Ready's status (False while pending);
    # an exact "type Ready with status True" would need a conjunction or a filter of a filter, and kubectl (the
    # layer's) refuses both. The wait keeps "any True condition's type"; verify checks Ready exactly.
    for path in (
        '.status.conditions[?(@.type=="Ready" && @.status=="True")].type',
        '.status.conditions[?(@.type=="Ready")][?(@.status=="True")].type',
    ):
        with pytest.raises(subprocess.CalledProcessError):
            _ready_value(kubectl, "True", path)


def test_the_endpoint_is_created_after_the_policy_reports_ready(prod_synth, props):
    workloads = prod_synth.template_json(prod_synth.graph.workloads)["Resources"]
    policy_id = next(
        k
        for k in workloads
        if k.startswith("OperatorQwen27bChatL2PolicyQwen27bChat")
        and workloads[k]["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    )
    endpoint_id = next(
        k
        for k in workloads
        if k.startswith("OperatorQwen27bChatOperatorEndpointQwen27bChat")
        and workloads[k]["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    )
    waits = {k: r for k, r in workloads.items() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"}
    wait_id, wait = next(
        (k, r) for k, r in waits.items() if k.startswith("OperatorQwen27bChatL2PolicyReadyQwen27bChat")
    )
    assert wait["Properties"]["ObjectType"] == contract.POLICY_RESOURCE
    assert wait["Properties"]["ObjectName"] == policy_name(props)
    assert wait["Properties"]["ObjectNamespace"] == props.namespace
    assert wait["Properties"]["JsonPath"] == contract.READY_JSONPATH
    assert policy_id in wait["DependsOn"]
    assert wait_id in workloads[endpoint_id]["DependsOn"] and policy_id in workloads[endpoint_id]["DependsOn"]


def test_kyverno_admission_runs_highly_available(prod_synth):
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    kyverno_chart = next(
        r
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kyverno"
    )
    values = json.loads(kyverno_chart["Properties"]["Values"])
    admission = values["admissionController"]
    assert admission["replicas"] >= 3
    pdb = admission["podDisruptionBudget"]
    assert pdb["enabled"] is True and 1 <= pdb["minAvailable"] < admission["replicas"]
    # chart 3.5.2's _pdb.tpl fails when both are set, and its default minAvailable is 1
    assert "maxUnavailable" not in pdb


def test_every_kyverno_pod_runs_on_the_system_nodes(prod_synth):
    # Kyverno chart 3.5.2: each controller, hook job and test pod takes <component>.nodeSelector, else
    # global.nodeSelector; HyperPod reboots and replaces its nodes on its own.
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    kyverno_chart = next(
        r
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kyverno"
    )
    values = json.loads(kyverno_chart["Properties"]["Values"])
    nodegroup = next(r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup")["Properties"]
    assert values["global"]["nodeSelector"] == nodegroup["Labels"]
    components = ("admissionController", "backgroundController", "cleanupController", "reportsController")
    assert not [c for c in components if values.get(c, {}).get("nodeSelector")]


def test_the_namespaced_policy_filters_no_namespaces_as_kyverno_requires(l2_policy):
    from tests.fakes.kyverno import check_policy

    check_policy(l2_policy)  # Kyverno v1.15.2 refuses a namespaced Policy that filters namespaces
    bad = json.loads(json.dumps(l2_policy))
    bad["spec"]["rules"][0]["match"]["any"][0]["resources"]["namespaces"] = [bad["metadata"]["namespace"]]
    with pytest.raises(ValueError, match="Filtering namespaces not allowed in namespaced policies"):
        check_policy(bad)


def test_a_replaced_endpoint_gets_a_new_policy_and_a_new_wait(props):
    from kvtiers.k8s_charts.hyperpod_operator import policy_name

    assert props.object_name in policy_name(props)


def test_each_operator_pod_writes_chunks_through_a_temporary_directory_of_its_own(kubectl, l2_policy, props):
    admitted = kyverno.admit(kubectl, l2_policy, operator_pod(props))
    env = container(admitted.pod, model_container_name(props))["env"]
    order = [e["name"] for e in env]
    extra = next(e for e in env if e["name"] == "LMCACHE_EXTRA_CONFIG")
    assert json.loads(extra["value"]) == {"fs_connector_relative_tmp_dir": "tmp-$(POD_NAME)"}
    # Kubernetes expands $(POD_NAME) only from a variable declared before it
    pod_name = next(e for e in env if e["name"] == "POD_NAME")
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert order.index("POD_NAME") < order.index("LMCACHE_EXTRA_CONFIG")


# ------------------------------------------------------------------------------------- metrics directory


def test_each_model_server_gets_a_metrics_directory_of_its_own_at_admission(kubectl, l2_policy, props):
    # Not /dev/shm: vLLM never wipes a directory the user sets, and /dev/shm (the pod's shm volume) is NCCL's.
    from kvtiers.k8s_charts.serving.endpoint import PROMETHEUS_MULTIPROC_SIZE

    admitted = kyverno.admit(kubectl, l2_policy, operator_pod(props)).pod
    model = container(admitted, model_container_name(props))
    env = {e["name"]: e.get("value") for e in model["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == PROMETHEUS_MULTIPROC_DIR != "/dev/shm"
    (mount,) = [m for m in model["volumeMounts"] if m["mountPath"] == PROMETHEUS_MULTIPROC_DIR]
    (volume,) = [v for v in admitted["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": PROMETHEUS_MULTIPROC_SIZE}


def test_a_pod_without_the_metrics_directory_is_denied(kubectl, l2_policy, props):
    pod = operator_pod(props)
    errors = kyverno.validate(l2_policy, pod)
    assert any("PROMETHEUS_MULTIPROC_DIR" in e for e in errors), errors
