"""`kvtiers verify` on operator endpoints, against the fake API server whose operator pods come from the shared
operator pod model (tests/fakes/operator_pod.py) admitted through the real policy (tests/fakes/kyverno.py)."""

from __future__ import annotations

import pytest
from kubernetes.client import CoreV1Api

from kvtiers.cli.verify import k8s, runner
from kvtiers.config import load_environment, model
from tests.conftest import CONFIG_DIR
from tests.fakes import secrets_manager
from tests.fakes.cluster import build_healthy
from tests.fakes.kube_server import FakeKube

OPERATOR_ENDPOINT = "qwen2-7b-chat"


@pytest.fixture(scope="module")
def prod():
    return load_environment(CONFIG_DIR / "prod.yaml")


@pytest.fixture(scope="module")
def objects(prod_objects):
    return prod_objects


def operator_endpoints(env):
    return [e for e in env.serving.endpoints if e.serving == "operator"]


def endpoint(env, name=OPERATOR_ENDPOINT):
    return next(e for e in env.serving.endpoints if e.name == name)


def test_verify_finds_operator_pods_by_the_operators_label_and_sees_their_l2(prod, objects, kubectl):
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        core = CoreV1Api(kube.api_client())
        e = endpoint(prod)
        engines = k8s.check_engines(core, prod, e)
        assert engines.ok, engines
        l2 = k8s.check_operator_l2(core, prod, e)
        assert l2.ok, l2
        object_name = next(o for o in objects if o["kind"] == "InferenceEndpointConfig")["metadata"]["name"]
        assert any(
            f"labelSelector=app%3D{object_name}" in path or f"labelSelector=app={object_name}" in path
            for _, path in kube.log
        )


def test_verify_flags_operator_pods_admitted_without_the_policy(prod, objects, kubectl):
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl, operator_policy=False)
        check = k8s.check_operator_l2(CoreV1Api(kube.api_client()), prod, endpoint(prod))
        assert not check.ok
        assert "no volume curvine-l2" in check.detail and "LMCACHE_REMOTE_URL" not in check.detail
        assert "Ready" in check.hint


def test_verify_checks_the_l2_instead_of_our_router_for_operator_endpoints(prod):
    steps = [
        (area, name) for area, name, _ in runner.steps(prod, runner.Clients(sagemaker=None, kube=None), False, 1, 1)
    ]
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "Curvine L2 attached") in steps
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "operator endpoint") in steps
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "invocation through the operator's router") in steps
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "router") not in steps
    self_managed = next(e.name for e in prod.serving.endpoints if e.serving == "self_managed")
    assert (f"endpoint:{self_managed}", "router") in steps


def _v1pod(pod: dict):
    from kubernetes.client import ApiClient

    return ApiClient()._ApiClient__deserialize(pod, "V1Pod")


@pytest.mark.parametrize("variant", ["admitted", "unmutated", "renamed", "mount-elsewhere", "url-overridden", "no-url"])
def test_verifys_l2_check_agrees_with_the_policys_cel_check(prod, kubectl, variant):
    from kvtiers.k8s_charts.hyperpod_operator import policy
    from tests.fakes import kyverno
    from tests.fakes.operator_pod import model_container_name, operator_pod

    props = model.operator_endpoint(prod, OPERATOR_ENDPOINT)
    rule = policy(props)
    pod = operator_pod(
        props,
        container_name="worker" if variant == "renamed" else None,
        model_mount="/models" if variant == "mount-elsewhere" else None,
    )
    if variant != "unmutated":
        pod = kyverno.mutate(kubectl, rule, pod)
    name = "worker" if variant == "renamed" else model_container_name(props)
    container = next((c for c in pod["spec"]["containers"] if c["name"] == name), None)
    if variant == "url-overridden":
        container["env"].append({"name": "LMCACHE_REMOTE_URL", "value": "lm://elsewhere:1"})
    if variant == "no-url":
        container["env"] = [e for e in container["env"] if e["name"] != "LMCACHE_REMOTE_URL"]
    cel_ok = not kyverno.validate(rule, pod)
    verify_ok = not k8s.missing_l2(_v1pod(pod), prod, next(e for e in prod.serving.endpoints if e.name == props.name))
    assert cel_ok == verify_ok == (variant in ("admitted", "renamed"))


def kube_results(env, kube, sagemaker=None, *, deployed=True):
    if deployed and sagemaker is None:
        sagemaker = FakeSageMaker([model.operator_endpoint(env, e.name).object_name for e in operator_endpoints(env)])
    clients = runner.Clients(
        sagemaker=sagemaker,
        kube=kube.api_client(),
        sagemaker_runtime=stubbed_runtime(env),
        secretsmanager=secrets_manager.for_environment(env),
    )
    results = runner.run(env, clients, show_progress=False, metrics_timeout=0.3, poll=0.05)
    return [r for r in results if r.area != "hyperpod"]


def test_verify_passes_on_prod_built_from_its_rendered_objects(prod, objects, kubectl):
    """Both serving modes: self-managed endpoints with our routers, the operator endpoint with its own."""
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        results = kube_results(prod, kube)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    checked = {(r.area, r.name) for r in results}
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "operator endpoint deployed") in checked
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "Curvine L2 attached by policy") in checked
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "no leftovers of earlier versions") in checked
    assert (f"endpoint:{OPERATOR_ENDPOINT}", "L2 policy Ready") in checked
    assert {("endpoint:llama31-70b", "router sees engines"), ("endpoint:qwen25-32b", "router sees engines")} <= checked
    kvaware_checks = {r.area: r for r in results if r.name == "kvaware workers registered"}
    assert set(kvaware_checks) == {"endpoint:llama31-70b"}  # the kvaware endpoint only
    assert (
        "16 LMCache worker(s) registered, 2 Ready engine pod(s) x 8 rank(s) = 16"
        in kvaware_checks["endpoint:llama31-70b"].detail
    )
    assert f"cross-pod:{OPERATOR_ENDPOINT}" in {r.area for r in results}
    # observability is on in prod: after the cross-pod checks, each endpoint's per-tier counters
    tiers = {r.area: r for r in results if r.name == "per-tier counters"}
    assert set(tiers) == {f"tiers:{e.name}" for e in prod.serving.endpoints}
    assert "LMCache (L1+L2) 1941 (50%)" in tiers["tiers:qwen25-32b"].detail


def test_verify_fails_clearly_when_an_operator_endpoint_lacks_its_l2(prod, objects, kubectl):
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl, operator_policy=False)
        failed = [r for r in kube_results(prod, kube) if not r.ok]
    (l2,) = [r for r in failed if r.name == "Curvine L2 attached by policy"]
    assert l2.area == f"endpoint:{OPERATOR_ENDPOINT}"
    assert "no volume curvine-l2 from claim curvine-l2" in l2.detail and "not mounted at" in l2.detail
    assert "delete them to re-admit" in l2.hint


@pytest.mark.parametrize("change", ["pending", "routing-off", "missing"])
def test_verify_reports_the_operator_endpoints_state(prod, objects, kubectl, change):
    from tests.fakes.cluster import object_path

    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        iec = next(o for o in objects if o["kind"] == "InferenceEndpointConfig")
        stored = kube.objects[object_path(iec)]
        if change == "pending":
            stored["status"]["state"] = "DeploymentInProgress"
        elif change == "routing-off":
            stored["spec"] = {**stored["spec"], "intelligentRoutingSpec": {"enabled": False}}
        else:
            del kube.objects[object_path(iec)]
        (check,) = [
            r for r in kube_results(prod, kube) if r.name in ("operator endpoint deployed", "operator endpoint")
        ]
    assert not check.ok
    expected = {
        "pending": "is DeploymentInProgress, not DeploymentComplete",
        "routing-off": "intelligentRoutingSpec.enabled is False",
        "missing": "HTTP 404",
    }[change]
    assert expected in check.detail


def test_verify_fails_when_engines_lack_the_counters_the_rules_read(prod, objects, kubectl):
    with FakeKube() as kube:
        handles = build_healthy(kube, prod, objects, kubectl=kubectl)
        for engine in handles["engines"].values():
            engine.vllm_counters = False
        failed = [r for r in kube_results(prod, kube) if not r.ok]
    assert {r.area for r in failed} == {f"tiers:{e.name}" for e in prod.serving.endpoints}
    assert all("missing" in r.detail and "vllm:prefix_cache_queries_total" in r.detail for r in failed)


@pytest.mark.parametrize("registered", [8, None])
def test_verify_fails_when_kvaware_engines_are_not_registered_with_the_router(prod, objects, kubectl, registered):
    """One of two engines (8 ranks each) never registered, or the router serves no controller series at all."""
    with FakeKube() as kube:
        handles = build_healthy(kube, prod, objects, kubectl=kubectl)
        handles["routers"]["llama31-70b"]["registered"] = registered
        (check,) = [r for r in kube_results(prod, kube) if r.name == "kvaware workers registered"]
    assert not check.ok and check.area == "endpoint:llama31-70b"
    expected = (
        "8 LMCache worker(s) registered" if registered else "no lmcache:cache_controller_registered_workers_count"
    )
    assert expected in check.detail


def test_verify_fails_when_an_l2_endpoint_serves_no_lmcache_series(prod, objects, kubectl):
    """vLLM's counters alone (no PROMETHEUS_MULTIPROC_DIR: LMCache's series never reach /metrics) are not enough
    for an endpoint with the L2: its L2 rows and alerts would see nothing."""
    with FakeKube() as kube:
        handles = build_healthy(kube, prod, objects, kubectl=kubectl)
        for engine in handles["engines"].values():
            engine.lmcache = False
        failed = {r.area: r for r in kube_results(prod, kube) if not r.ok and r.name == "per-tier counters"}
    l2_endpoints = {e.name for e, sized in model.sized_endpoints(prod) if sized.l2_enabled}
    assert set(failed) == {f"tiers:{name}" for name in l2_endpoints}
    assert all("lmcache:num_remote_read_bytes_total" in r.detail for r in failed.values())


def test_dev_without_observability_does_not_read_tier_counters(dev_env):
    steps = [name for _, name, _ in runner.steps(dev_env, runner.Clients(sagemaker=None, kube=None), True, 1, 1)]
    assert "per-tier counters" not in steps


def _operator_model_containers(prod, kubectl):
    from tests.fakes.cluster import operator_pods

    mount = model.operator_endpoint(prod, OPERATOR_ENDPOINT).spec()["worker"]["modelVolumeMount"]["mountPath"]
    return [
        c
        for pod in operator_pods(prod, OPERATOR_ENDPOINT, kubectl)
        for c in pod["spec"]["containers"]
        if any(m["mountPath"] == mount for m in c["volumeMounts"])
    ]


def test_operator_engines_export_lmcache_metrics_on_the_invocation_port(prod, kubectl):
    # vLLM 0.12.0 serves the worker processes' registries (LMCache's) only from PROMETHEUS_MULTIPROC_DIR.
    from tests.fakes.cluster import exports_lmcache_metrics

    containers = _operator_model_containers(prod, kubectl)
    assert containers and all(exports_lmcache_metrics(c) for c in containers)


def test_verify_requires_lmcache_series_of_an_operator_endpoint_with_the_l2(prod, objects, kubectl):
    from kubernetes.client import CoreV1Api

    from kvtiers.cli.verify import tiers

    assert model.sizing(prod).endpoint(OPERATOR_ENDPOINT).l2_enabled
    with FakeKube() as kube:
        handles = build_healthy(kube, prod, objects, kubectl=kubectl)
        core, api = CoreV1Api(kube.api_client()), kube.api_client()
        assert tiers.check_tier_counters(core, api, prod, endpoint(prod)).ok
        for pod, engine in handles["engines"].items():
            if pod.startswith(OPERATOR_ENDPOINT):
                engine.lmcache = False
        check = tiers.check_tier_counters(core, api, prod, endpoint(prod))
        assert (
            not check.ok
            and "lmcache:num_remote_read_bytes" in check.detail
            and "PROMETHEUS_MULTIPROC_DIR" in check.hint
        )


def test_a_model_container_without_the_multiprocess_dir_exports_no_lmcache_metrics(prod, kubectl):
    from tests.fakes.cluster import exports_lmcache_metrics

    (container, *_) = _operator_model_containers(prod, kubectl)
    container["env"] = [e for e in container["env"] if e["name"] != "PROMETHEUS_MULTIPROC_DIR"]
    assert not exports_lmcache_metrics(container)


def stubbed_runtime(env, *, answer=None, error=None):
    """A sagemaker-runtime client whose InvokeEndpoint must name the operator endpoint's SageMaker endpoint (the
    object name the rendered InferenceEndpointConfig carries)."""
    import io
    import json

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import ANY, Stubber

    client = boto3.client("sagemaker-runtime", region_name=env.region, aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    expected = {
        "EndpointName": model.operator_endpoint(env, OPERATOR_ENDPOINT).spec()["endpointName"],
        "ContentType": "application/json",
        "Accept": "application/json",
        "Body": ANY,
    }
    if error:
        stubber.add_client_error("invoke_endpoint", service_error_code=error, expected_params=expected)
    else:
        data = json.dumps(answer if answer is not None else {"choices": [{"text": "x"}]}).encode()
        stubber.add_response(
            "invoke_endpoint",
            {"Body": StreamingBody(io.BytesIO(data), len(data)), "ContentType": "application/json"},
            expected,
        )
    stubber.activate()
    return client


def test_verify_invokes_the_operator_endpoint_through_its_sagemaker_endpoint(prod):
    from kvtiers.cli.verify import aws

    check = aws.check_operator_invocation(stubbed_runtime(prod), prod, endpoint(prod))
    assert check.ok, check
    object_name = model.operator_endpoint(prod, OPERATOR_ENDPOINT).object_name
    assert object_name in check.detail


@pytest.mark.parametrize("answer, error", [({"error": "x"}, None), (None, "ValidationError")])
def test_verify_fails_when_the_router_path_does_not_answer(prod, answer, error):
    from kvtiers.cli.verify import aws

    check = aws.check_operator_invocation(stubbed_runtime(prod, answer=answer, error=error), prod, endpoint(prod))
    assert not check.ok and "describe-endpoint" in check.hint


def test_the_operator_endpoint_has_a_sagemaker_endpoint_named_after_its_object(prod):
    props = model.operator_endpoint(prod, OPERATOR_ENDPOINT)
    assert props.spec()["endpointName"] == props.object_name


# ------------------------------------------------------------------------------------- leftovers of a rename


class FakeSageMaker:
    """SageMaker's ListEndpoints as boto3's paginator returns it (one page), over the endpoint names given."""

    def __init__(self, endpoints: list[str]) -> None:
        self.endpoints = endpoints

    def get_paginator(self, operation: str):
        assert operation == "list_endpoints"
        endpoints = self.endpoints

        class Pages:
            def paginate(self, NameContains: str = "", **_):
                yield {
                    "Endpoints": [
                        {"EndpointName": n, "EndpointStatus": "InService"} for n in endpoints if NameContains in n
                    ]
                }

        return Pages()


def rendered(*charts) -> list[dict]:
    import cdk8s

    app = cdk8s.App()
    for i, (chart, props) in enumerate(charts):
        chart(app, f"c{i}", endpoint=props)
    return [obj for chart in app.charts for obj in chart.to_json()]


def before_a_rename(props):
    """The same endpoint as it was deployed before a change of its chunk size (a new fingerprint, a new name)."""
    import dataclasses

    old = dataclasses.replace(
        props, lmcache=dataclasses.replace(props.lmcache, chunk_size=props.lmcache.chunk_size * 2)
    )
    assert old.object_name != props.object_name
    return old


def test_verify_names_what_a_rename_left_behind_with_the_commands_that_delete_it(prod, objects, kubectl):
    from kvtiers.k8s_charts.hyperpod_operator import CurvineL2PolicyChart, InferenceEndpointConfigChart, policy_name
    from tests.fakes.cluster import object_path

    props = model.operator_endpoint(prod, OPERATOR_ENDPOINT)
    old = before_a_rename(props)
    orphan = f"{OPERATOR_ENDPOINT}-0badf00d"  # a SageMaker endpoint whose InferenceEndpointConfig is gone
    sagemaker = FakeSageMaker([props.object_name, old.object_name, orphan, "someone-elses-endpoint"])
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        for obj in rendered((InferenceEndpointConfigChart, old), (CurvineL2PolicyChart, old)):
            kube.put(object_path(obj), obj)
        results = kube_results(prod, kube, sagemaker=sagemaker)
    (check,) = [r for r in results if r.name == "no leftovers of earlier versions"]
    assert not check.ok
    ns = prod.serving.namespace
    for name in (old.object_name, policy_name(old), f"{old.object_name}-l2-guard", orphan):
        assert name in check.detail
    left = check.detail.split("): ", 1)[1]  # after "(current: <name>)"
    assert props.object_name not in left and "someone-elses-endpoint" not in left
    assert f"kubectl -n {ns} delete inferenceendpointconfig {old.object_name}" in check.hint
    assert f"kubectl -n {ns} delete policies.kyverno.io {policy_name(old)}" in check.hint
    assert f"kubectl -n {ns} delete configmap {old.object_name}-l2-guard" in check.hint
    assert f"aws sagemaker delete-endpoint --endpoint-name {orphan}" in check.hint
    # The SageMaker endpoint of a leftover InferenceEndpointConfig goes with it (the operator deletes it).
    assert f"--endpoint-name {old.object_name}" not in check.hint


def test_verify_without_a_sagemaker_client_cannot_rule_out_leftover_endpoints(prod, objects, kubectl):
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        results = kube_results(prod, kube, deployed=False)
    (check,) = [r for r in results if r.name == "no leftovers of earlier versions"]
    assert not check.ok and "no sagemaker client" in check.detail


@pytest.mark.parametrize(
    "conditions",
    [
        [],
        [{"type": "Ready", "status": "False", "reason": "Failed"}],
        [{"type": "Other", "status": "True", "reason": "Succeeded"}, {"type": "Ready", "status": "False"}],
    ],
)
def test_verify_requires_the_policys_ready_condition_exactly(prod, objects, kubectl, conditions):
    # The readiness wait takes any True condition (kubectl's JSONPath has no conjunction): verify checks Ready itself.
    from kvtiers.k8s_charts.hyperpod_operator import policy_name
    from tests.fakes.cluster import object_path

    props = model.operator_endpoint(prod, OPERATOR_ENDPOINT)
    with FakeKube() as kube:
        build_healthy(kube, prod, objects, kubectl=kubectl)
        (stored,) = [o for p, o in kube.objects.items() if p.endswith(f"/policies/{policy_name(props)}")] or [None]
        assert stored is not None, object_path
        stored["status"] = {"conditions": conditions}
        (check,) = [r for r in kube_results(prod, kube) if r.name == "L2 policy Ready"]
    assert not check.ok and policy_name(props) in check.detail and "kubectl" in check.hint
