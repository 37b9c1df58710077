"""The operator path: InferenceEndpointConfig specs validate against the operator's own pydantic models (from the
sagemaker-hyperpod SDK that `make test` installs), the Kyverno policy touches only its endpoint's pods and sets the
same L2 values as the self-managed path, the add-ons are ordered and configured, and bad input is rejected."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess

import cdk8s
import pytest
import yaml

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts import operator_addons
from kvtiers.k8s_charts.hyperpod_operator import (
    CurvineL2PolicyChart,
    InferenceEndpointConfigChart,
    OperatorEndpoint,
    contract,
    policy,
    unsupported_spec_fields,
)
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import CONFIG_DIR, ROOT
from tests.synth import refused_by_app
from tests.test_config import rejected, set_path
from tests.test_lmcache_contract import ENGINE_LMCACHE, STUBS, needs, venv_python
from tests.upstream import require_upstream, vllm_routes

SDK_MODULE = ROOT / ".venv-hyperpod-sdk/sagemaker/hyperpod/inference/config/hp_endpoint_config.py"


@pytest.fixture(scope="module")
def prod():
    return load_environment(CONFIG_DIR / "prod.yaml")


@pytest.fixture(scope="module")
def operator_props(prod):
    return model.operator_endpoint(prod, "qwen2-7b-chat")


@pytest.fixture(scope="module")
def sdk():
    if not SDK_MODULE.is_file():
        pytest.skip("sagemaker-hyperpod SDK not installed (make test installs it into .venv-hyperpod-sdk)")
    spec = importlib.util.spec_from_file_location("hp_endpoint_config", SDK_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_validates_against_the_operators_model(sdk, operator_props):
    spec = operator_props.spec()
    sdk._HPEndpoint.model_validate(spec)
    # the top-level model ignores unknown keys, so check them here
    assert set(spec) <= set(sdk._HPEndpoint.model_fields)


def test_the_operator_model_rejects_a_misspelled_nested_field(sdk, operator_props):
    spec = operator_props.spec()
    spec["kvCacheSpec"] = {**spec["kvCacheSpec"], "enableL3Cache": True}
    with pytest.raises(Exception, match="enableL3Cache"):
        sdk._HPEndpoint.model_validate(spec)


def test_spec_fields(operator_props, prod):
    spec = operator_props.spec()
    assert spec["instanceType"] == "ml.g6e.2xlarge"
    assert spec["intelligentRoutingSpec"] == {"enabled": True, "routingStrategy": "prefixaware"}
    assert spec["kvCacheSpec"] == {"enableL1Cache": True, "enableL2Cache": False}  # Curvine comes from the policy
    assert spec["worker"]["image"] == prod.serving.images.vllm_image
    assert spec["worker"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert (
        spec["worker"]["resources"]["limits"]["memory"]
        == f"{model.sizing(prod).endpoint('qwen2-7b-chat').pod_memory_gib}Gi"
    )
    assert spec["modelSourceConfig"]["s3Storage"]["bucketName"] == "example-prod-models"


def test_immutable_fields_are_in_the_name(prod, operator_props):
    serving = prod.serving.model_copy(update={"hash_seed": "7"})
    changed = model.operator_endpoint(prod.model_copy(update={"serving": serving}), "qwen2-7b-chat")
    assert changed.object_name != operator_props.object_name
    assert operator_props.object_name.startswith("qwen2-7b-chat-")


def test_policy_selects_the_endpoints_pods_by_the_operators_label(prod, operator_props):
    app = cdk8s.App()
    policy = next(o for o in CurvineL2PolicyChart(app, "p", endpoint=operator_props).to_json() if o["kind"] == "Policy")
    selectors = [b["resources"]["selector"]["matchLabels"] for r in policy["spec"]["rules"] for b in r["match"]["any"]]
    iec = next(
        o
        for o in InferenceEndpointConfigChart(app, "i", endpoint=operator_props).to_json()
        if o["kind"] == "InferenceEndpointConfig"
    )
    # the operator labels its pods app=<object name> (sagemaker-hyperpod SDK hp_endpoint.py list_pods)
    assert selectors == [{"app": iec["metadata"]["name"]}] * 2
    # self-managed engines never carry that label
    for name in ("llama31-70b", "qwen25-32b"):
        objs = wiring.serving_chart(app, f"s-{name}", prod, name).to_json()
        labels = [o["spec"]["template"]["metadata"].get("labels", {}) for o in objs if o["kind"] == "Deployment"]
        assert all(lbl.get("app") != iec["metadata"]["name"] for lbl in labels)


def test_the_endpoint_sets_no_service_account_the_pinned_addon_does_not_know(operator_props, prod):
    # kubernetes.serviceAccountName arrived with chart 2.1.1; add-on v1.0.0-eksbuild.1 ships chart 2.0.0's CRD.
    spec = operator_props.spec()
    assert "kubernetes" not in spec
    assert prod.inference_operator.addons.inference_operator in operator_addons.ADDON_SPEC_FIELDS
    assert unsupported_spec_fields(spec, operator_props.addon_version) == []
    objs = InferenceEndpointConfigChart(cdk8s.App(), "i", endpoint=operator_props).to_json()
    assert [o["kind"] for o in objs] == ["InferenceEndpointConfig"]


def test_a_spec_field_the_pinned_addon_lacks_is_refused(operator_props, monkeypatch):
    assert unsupported_spec_fields({**operator_props.spec(), "kubernetes": {}}, "v1.0.0-eksbuild.1") == ["kubernetes"]
    original = OperatorEndpoint.spec
    monkeypatch.setattr(
        OperatorEndpoint, "spec", lambda self: {**original(self), "kubernetes": {"serviceAccountName": "x"}}
    )
    with pytest.raises(ValueError, match="has no spec field"):
        InferenceEndpointConfigChart(cdk8s.App(), "i", endpoint=operator_props)


def test_metrics_are_scraped_on_the_invocation_port(operator_props):
    spec = operator_props.spec()
    port = spec["worker"]["modelInvocationPort"]["containerPort"]
    assert spec["metrics"]["modelMetrics"]["port"] == port != contract.METRICS_DEFAULT_PORT


def test_the_alb_health_checks_a_path_its_target_serves(prod_synth):
    iec = next(
        o
        for objs in prod_synth.graph.workloads.chart_objects.values()
        for o in objs
        if o["kind"] == "InferenceEndpointConfig"
    )
    assert iec["spec"]["intelligentRoutingSpec"]["enabled"] is True
    # Without a loadBalancer block the CRD's default applies (chart 2.0.0, 51b8dd2: healthCheckPath default /ping).
    path = iec["spec"].get("loadBalancer", {}).get("healthCheckPath", contract.CRD_DEFAULT_HEALTH_CHECK_PATH)
    # With intelligent routing the ALB's target is the operator's router, production-stack's (its strategies'
    # names); AWS's routing samples set /health (hyperpod-cli 3d2049b #290; sagemaker-genai-hosting-examples).
    router = require_upstream("vllm-project/production-stack@vllm-stack-0.1.12:src/vllm_router/routers/main_router.py")
    served = set(re.findall(r'@main_router\.get\("([^"]+)"\)', router))
    assert path in served, f"the router serves GET {sorted(served)}, the ALB checks {path}"
    # Without routing (or if the ALB targets the model pods' proxy) the target is vLLM, which serves it too.
    assert ("get", path) in vllm_routes()


def test_the_lmcache_sizing_reaches_the_engine_through_the_worker_env(operator_props, prod):
    env = {e["name"]: e["value"] for e in operator_props.spec()["worker"]["environmentVariables"]}
    # the same per-worker L1 and chunk size the self-managed path writes into its LMCache file
    sizing = model.sizing(prod).endpoint("qwen2-7b-chat")
    assert float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]) == sizing.l1_bytes / sizing.gpus_per_replica / 1024**3
    llama_endpoint = model.endpoint(prod, "llama31-70b")
    llama_file = yaml.safe_load(
        next(
            o for o in wiring.serving_chart(cdk8s.App(), "s", prod, "llama31-70b").to_json() if o["kind"] == "ConfigMap"
        )["data"]["lmcache.yaml"]
    )
    assert int(env["LMCACHE_CHUNK_SIZE"]) == llama_file["chunk_size"]
    # the L2 URL and serde as the self-managed file has them, and the one hash seed; the policy adds only the mount
    # ... in the endpoint's own fingerprinted namespace, computed as for self-managed endpoints
    namespace = model.l2_namespace(prod, model.endpoint(prod, "qwen2-7b-chat"))
    own = model.l2_mount(prod, model.endpoint(prod, "qwen2-7b-chat"))
    assert own.sub_path == f"endpoint-qwen2-7b-chat/{namespace.directory}"
    assert env["LMCACHE_REMOTE_URL"] == own.remote_url == operator_props.lmcache.remote_url
    assert llama_file["remote_url"] == model.l2_mount(prod, llama_endpoint).remote_url
    assert env["LMCACHE_REMOTE_SERDE"] == llama_file["remote_serde"] == namespace.serde
    assert env["PYTHONHASHSEED"] == prod.serving.hash_seed == namespace.hash_seed
    # the pod memory limit was sized for that L1
    assert operator_props.memory_gib == sizing.pod_memory_gib


def test_the_kv_cache_spec_has_no_size_fields_so_env_carries_them(operator_props):
    assert set(operator_props.spec()["kvCacheSpec"]) <= contract.KV_CACHE_SPEC_FIELDS


def test_a_new_l1_size_replaces_the_endpoint(tmp_path, operator_props):
    def halve_l1(raw):
        endpoint = next(e for e in raw["serving"]["endpoints"] if e["name"] == "qwen2-7b-chat")
        endpoint["l1_gib"] //= 2

    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    halve_l1(raw)
    (tmp_path / "prod.yaml").write_text(yaml.safe_dump(raw))
    changed = model.operator_endpoint(load_environment(tmp_path / "prod.yaml"), "qwen2-7b-chat")
    assert changed.lmcache.max_local_cpu_size_gib < operator_props.lmcache.max_local_cpu_size_gib
    # worker environment is immutable in the operator: a new size is a new object, visible in cdk diff
    assert changed.object_name != operator_props.object_name


def test_addons_are_pinned_configured_and_ordered(prod_synth, prod):
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    operator_addons = (
        "cert-manager",
        "aws-mountpoint-s3-csi-driver",
        "aws-fsx-csi-driver",
        "metrics-server",
        "amazon-sagemaker-hyperpod-inference",
    )
    addons = {
        r["Properties"]["AddonName"]: (k, r)
        for k, r in resources.items()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] in operator_addons
    }
    versions = prod.inference_operator.addons
    assert {n: r["Properties"]["AddonVersion"] for n, (_, r) in addons.items()} == {
        "cert-manager": versions.cert_manager,
        "aws-mountpoint-s3-csi-driver": versions.s3_csi_driver,
        "aws-fsx-csi-driver": versions.fsx_csi_driver,
        "metrics-server": versions.metrics_server,
        "amazon-sagemaker-hyperpod-inference": versions.inference_operator,
    }
    operator_id, operator = addons["amazon-sagemaker-hyperpod-inference"]
    assert {addons[n][0] for n in addons if n != "amazon-sagemaker-hyperpod-inference"} <= set(operator["DependsOn"])
    config = operator["Properties"]["ConfigurationValues"]
    keys = json.dumps(config)
    for key in ("executionRoleArn", "tlsCertificateS3Bucket", "hyperpodClusterArn", "keda"):
        assert key in keys
    role = next(
        r
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Role"
        and str(r["Properties"].get("RoleName", "")).startswith("SageMakerHyperPodInference")
    )
    assert any(
        "AmazonSageMakerHyperPodInferenceAccess" in json.dumps(a) for a in role["Properties"]["ManagedPolicyArns"]
    )
    # the operator after the HyperPod cluster, Kyverno after the operator (platform stack); the policy before the
    # endpoint (workloads stack, which deploys after the platform stack)
    hyperpod = next(k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::Cluster")
    assert hyperpod in operator["DependsOn"]
    kyverno = next(
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kyverno"
    )
    assert operator_id in resources[kyverno]["DependsOn"]
    workloads = prod_synth.template_json(prod_synth.graph.workloads)["Resources"]
    policy = next(k for k in workloads if k.startswith("OperatorQwen27bChatL2PolicyQwen27bChat"))
    endpoint = next(k for k in workloads if k.startswith("OperatorQwen27bChatOperatorEndpointQwen27bChat"))
    assert policy in workloads[endpoint]["DependsOn"]
    assert prod_synth.graph.platform in prod_synth.graph.workloads.dependencies


def test_operator_with_tieredstorage_backend_needs_tiered_storage(tmp_path):
    def change(raw):
        raw["serving"]["endpoints"][0]["serving"] = "operator"
        raw["inference_operator"] = {"l2_backend": "tieredstorage"}
        raw["hyperpod"]["tiered_storage"]["enabled"] = False

    assert "needs hyperpod.tiered_storage.enabled: true" in rejected(tmp_path, change)


def test_routing_outside_the_four(tmp_path):
    message = rejected(tmp_path, lambda raw: set_path(raw, "serving.endpoints.0.routing", "loadaware"))
    assert "serving.endpoints.0.routing" in message and "'prefixaware', 'kvaware', 'session' or 'roundrobin'" in message


def test_instance_group_outside_the_environment(tmp_path):
    message = _refused(
        _prod_variant(tmp_path, lambda raw: set_path(raw, "serving.endpoints.0.instance_group", "g6e-other"))
    )
    assert "instance_group 'g6e-other' is not" in message and "g6e-small" in message


FROM_ENV = r"""
import json, os, sys
from lmcache.v1.config import LMCacheEngineConfig
cfg = LMCacheEngineConfig.from_env()
print(json.dumps({k: getattr(cfg, k) for k in json.loads(sys.argv[1])}))
"""


@needs(ENGINE_LMCACHE)
def test_lmcaches_own_loader_reads_the_worker_env(operator_props):
    # The engine image's LMCache maps LMCACHE_<KEY> to the config key the self-managed file uses.
    env = {e["name"]: e["value"] for e in operator_props.worker_env if e["name"].startswith("LMCACHE_")}
    keys = ["chunk_size", "local_cpu", "max_local_cpu_size", "remote_url", "remote_serde"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LMCACHE_")}
    clean["PYTHONPATH"] = str(STUBS)  # LMCache imports torch; the stand-in only satisfies the import
    out = subprocess.run(
        [str(venv_python(ENGINE_LMCACHE)), "-c", FROM_ENV, json.dumps(keys)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == {
        "chunk_size": operator_props.lmcache.chunk_size,
        "local_cpu": True,
        "max_local_cpu_size": operator_props.lmcache.max_local_cpu_size_gib,
        "remote_url": operator_props.lmcache.remote_url,
        "remote_serde": operator_props.lmcache.remote_serde,
    }


def test_a_hugging_face_source_on_the_pinned_addon_is_rejected(tmp_path):
    """Chart 2.0.0's CRD (the pinned add-on's) allows only s3 and fsx model sources; huggingface came with 2.1.1."""

    def to_huggingface(raw):
        endpoint = next(e for e in raw["serving"]["endpoints"] if e.get("serving") == "operator")
        endpoint["source"] = {"type": "huggingface"}

    message = _refused(_prod_variant(tmp_path, to_huggingface))
    assert "huggingface weights are not a model source the Inference Operator add-on v1.0.0-eksbuild.1 accepts" in (
        message
    )


def _operator_named(tmp_path, name):
    from kvtiers.config import load_environment

    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    next(e for e in raw["serving"]["endpoints"] if e.get("serving") == "operator")["name"] = name
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_environment(path)


def test_the_longest_allowed_operator_name_keeps_every_derived_name_within_63(tmp_path):
    from tests.fakes.kyverno import check_policy

    name = "e" * 43
    props = model.operator_endpoint(_operator_named(tmp_path, name), name)
    body = policy(props)
    assert len(body["metadata"]["name"]) == 63
    check_policy(body)  # Kyverno v1.15.2 refuses longer policy names
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    for value in props.pod_labels.values():
        assert len(value) <= 63 and label_value.match(value)


def test_an_operator_name_one_longer_is_refused_naming_the_limit(tmp_path):
    _operator_named(tmp_path, "e" * 44)
    message = refused_by_app(tmp_path / "prod.yaml")
    assert "OperatorEndpoint 'e" in message and "is not a DNS-1123 label of at most 43 characters" in message


def test_the_operator_endpoint_construct_refuses_a_name_its_policy_could_not_carry(operator_props):
    import dataclasses

    with pytest.raises(
        ValueError, match="OperatorEndpoint 'e{44}': name 'e{44}' is not a DNS-1123 label of at most 43 characters"
    ):
        dataclasses.replace(operator_props, name="e" * 44)


def test_a_self_managed_name_is_limited_by_its_load_balancer_service(tmp_path):
    from tests.test_config import write_variant

    def named(length):
        return lambda raw: raw["serving"]["endpoints"][0].update(name="s" * length)

    # 52 passes the chart's check (the placement may still refuse it on its own terms); 53 does not.
    assert "ServingChart: name" not in refused_or_none(write_variant(tmp_path, named(52)))
    message = refused_by_app(write_variant(tmp_path, named(53)))
    assert "ServingChart: name" in message and "is not a DNS-1123 label of at most 52 characters" in message


def test_the_s3_csi_add_on_is_the_version_and_identity_aws_installs_for_the_operator(prod_synth):
    # AWS's helm_to_addon.sh (charts/inference-operator/migration): aws-mountpoint-s3-csi-driver v1.14.1-eksbuild.1
    # with --service-account-role-arn, the role trusting kube-system:s3-csi-driver-sa through the cluster's OIDC
    # provider with the sts.amazonaws.com audience.
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    addon = next(
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "aws-mountpoint-s3-csi-driver"
    )
    assert addon["AddonVersion"] == "v1.14.1-eksbuild.1" and "PodIdentityAssociations" not in addon
    role_id = addon["ServiceAccountRoleArn"]["Fn::GetAtt"][0]
    (statement,) = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity" and "Federated" in statement["Principal"]
    subject = resources[statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]]["Properties"]["Value"]
    text = "".join(p if isinstance(p, str) else "" for p in subject["Fn::Join"][1])
    assert ':sub":"system:serviceaccount:kube-system:s3-csi-driver-sa"' in text and ':aud":"sts.amazonaws.com"' in text


def test_the_alb_controller_is_enabled_with_its_own_role(prod_synth):
    # helm_to_addon.sh: alb.enabled with serviceAccount.roleArn, the role trusted by
    # hyperpod-inference-system:aws-load-balancer-controller.
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    addon = next(
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-inference"
    )
    text = json.dumps(addon["ConfigurationValues"])
    assert '\\"alb\\":{\\"enabled\\":true,\\"serviceAccount\\":{\\"create\\":true,\\"roleArn\\":\\"' in text
    role_id = next(
        k
        for k in resources
        if k.startswith("PlatformInferenceOperatorAlbControllerRole")
        or "AlbControllerRole" in k
        and resources[k]["Type"] == "AWS::IAM::Role"
    )
    assert role_id in text
    (statement,) = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    subject = resources[statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]]["Properties"]["Value"]
    joined = "".join(p if isinstance(p, str) else "" for p in subject["Fn::Join"][1])
    assert ':sub":"system:serviceaccount:hyperpod-inference-system:aws-load-balancer-controller"' in joined
    policy = next(
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
    )
    deletes = next(s for s in policy if "elasticloadbalancing:DeleteLoadBalancer" in s["Action"])
    assert deletes["Condition"] == {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    # the targets' security groups (node and cluster groups, untagged) are opened to the ALB: no tag condition
    assert any(
        {"ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"} <= set(s["Action"])
        and "Condition" not in s
        and "security-group/*" in json.dumps(s["Resource"])
        for s in policy
    )


def test_the_operator_endpoint_name_clients_invoke_is_a_stack_output(prod_synth, prod):
    outputs = prod_synth.template_json(prod_synth.graph.workloads)["Outputs"]
    name = model.operator_endpoint(prod, "qwen2-7b-chat").object_name
    assert outputs["OperatorEndpointNameQwen27bChat"]["Value"] == name


def test_the_newer_addon_accepts_its_crd_fields_and_the_pinned_one_refuses_them(operator_props):
    # Chart 2.2.2's CRD (operator v3.2.0, add-on v1.3.0-eksbuild.1) adds kubernetes, dnsConfig, dataCapture, pdSpec.
    spec = {**operator_props.spec(), "kubernetes": {}, "pdSpec": {}}
    assert unsupported_spec_fields(spec, "v1.3.0-eksbuild.1") == []
    assert unsupported_spec_fields(spec, "v1.0.0-eksbuild.1") == ["kubernetes", "pdSpec"]


# ------------------------------------------------------------------------------------- add-on versions


def _prod_variant(tmp_path, change):
    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    change(raw)
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _refused(path) -> str:
    message = refused_by_app(path)
    assert message.startswith(f"{path}: "), message
    return message


def test_an_addon_version_without_reviewed_crd_fields_is_refused(tmp_path):
    # An unreviewed CRD could lack a field the spec sets: kubectl's strict validation would refuse the object on
    # deploy. Refused at load time, naming the file, the field and the versions whose CRDs were read.
    path = _prod_variant(
        tmp_path,
        lambda raw: raw.setdefault("inference_operator", {}).update(addons={"inference_operator": "v1.4.0-eksbuild.1"}),
    )
    message = _refused(path)
    assert "addon_version" in message
    assert "v1.4.0-eksbuild.1" in message and "'v1.0.0-eksbuild.1'" in message and "'v1.3.0-eksbuild.1'" in message


def test_the_endpoint_construct_refuses_an_addon_version_it_has_no_fields_for(operator_props):
    import dataclasses

    with pytest.raises(ValueError, match=r"addon_version .*v1\.0\.0-eksbuild\.1.*v9\.9\.9-eksbuild\.1"):
        dataclasses.replace(operator_props, addon_version="v9.9.9-eksbuild.1")


def _operator_l2_off_on_v1_3(raw):
    raw.setdefault("inference_operator", {})["addons"] = {"inference_operator": "v1.3.0-eksbuild.1"}
    next(e for e in raw["serving"]["endpoints"] if e.get("serving") == "operator")["l2"] = "off"


def test_the_newer_addon_is_refused_for_an_operator_endpoint_with_the_l2_off(tmp_path):
    # aws/sagemaker-hyperpod-cli#431: operator v3.2.0 strips the worker's LMCACHE_* env. Without the L2 there is no
    # Kyverno policy to restore it, so the endpoint would run with other L1 and chunk sizes than the sizing's.
    message = _refused(_prod_variant(tmp_path, _operator_l2_off_on_v1_3))
    assert "qwen2-7b-chat" in message and "v1.3.0-eksbuild.1" in message and "l2" in message
    assert "v1.0.0-eksbuild.1" in message


def test_the_newer_addon_is_accepted_for_an_operator_endpoint_with_the_curvine_l2(tmp_path):
    path = _prod_variant(
        tmp_path,
        lambda raw: raw.setdefault("inference_operator", {}).update(addons={"inference_operator": "v1.3.0-eksbuild.1"}),
    )
    props = model.operator_endpoint(load_environment(path), "qwen2-7b-chat")
    assert props.curvine_l2 and props.addon_version == "v1.3.0-eksbuild.1"


def test_the_endpoint_construct_refuses_the_newer_addon_without_the_curvine_l2(operator_props):
    import dataclasses

    lmcache = dataclasses.replace(operator_props.lmcache, remote_url=None)
    with pytest.raises(ValueError, match=r"v1\.3\.0-eksbuild\.1.*LMCACHE_"):
        dataclasses.replace(
            operator_props, addon_version="v1.3.0-eksbuild.1", l2_backend=None, l2=None, lmcache=lmcache
        )


def test_an_operator_endpoint_on_a_tainted_group_is_refused_at_load(tmp_path):
    def taint_its_group(raw):
        endpoint = next(e for e in raw["serving"]["endpoints"] if e.get("serving") == "operator")
        group = next(g for g in raw["hyperpod"]["instance_groups"] if g["name"] == endpoint["instance_group"])
        group["taints"] = [{"key": "kvtiers.io/dedicated", "value": "l2", "effect": "NoSchedule"}]
        group["deep_health_checks"] = []

    message = _refused(_prod_variant(tmp_path, taint_its_group))
    assert "qwen2-7b-chat" in message and "g6e-small" in message and "no tolerations field" in message


def refused_or_none(path) -> str:
    try:
        return refused_by_app(path)
    except pytest.fail.Exception:
        return ""
