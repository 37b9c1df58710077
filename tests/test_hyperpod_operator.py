"""The operator path: InferenceEndpointConfig specs validate against the operator's own pydantic models (from the
sagemaker-hyperpod SDK that `make test` installs), the Kyverno policy touches only its endpoint's pods and sets the
same L2 values as the self-managed path, the add-ons are ordered and configured, and bad input is rejected."""

from __future__ import annotations

import importlib.util
import json

import cdk8s
import pytest

from kvtiers.config import load_environment
from kvtiers.k8s_charts.hyperpod_operator import CurvineL2PolicyChart, InferenceEndpointConfigChart, OperatorEndpointProps
from kvtiers.k8s_charts.l2 import L2Namespace, L2Settings
from kvtiers.k8s_charts.serving import ServingChart, ServingProps
from tests.conftest import CONFIG_DIR, ROOT
from tests.test_config import rejected, set_path

SDK_MODULE = ROOT / ".venv-hyperpod-sdk/sagemaker/hyperpod/inference/config/hp_endpoint_config.py"


@pytest.fixture(scope="module")
def prod():
    return load_environment(CONFIG_DIR / "prod.yaml")


@pytest.fixture(scope="module")
def operator_props(prod):
    return OperatorEndpointProps.from_environment(prod, "qwen2-7b-chat")


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
    assert spec["worker"]["resources"]["limits"]["memory"] == f"{prod.sizing.endpoint('qwen2-7b-chat').pod_memory_gib}Gi"
    assert spec["modelSourceConfig"]["s3Storage"]["bucketName"] == "example-prod-models"


def test_immutable_fields_are_in_the_name(prod, operator_props):
    serving = prod.serving.model_copy(update={"hash_seed": "7"})
    changed = OperatorEndpointProps.from_environment(prod.model_copy(update={"serving": serving}), "qwen2-7b-chat")
    assert changed.object_name != operator_props.object_name
    assert operator_props.object_name.startswith("qwen2-7b-chat-")


def test_policy_selects_only_the_endpoints_pods_and_sets_the_shared_l2_values(prod, operator_props):
    app = cdk8s.App()
    policy = CurvineL2PolicyChart(app, "p", props=operator_props).to_json()[0]
    assert policy["kind"] == "Policy" and policy["spec"]["failurePolicy"] == "Fail"
    mutate, validate = policy["spec"]["rules"]
    condition = mutate["preconditions"]["all"][0]
    assert condition["value"] == operator_props.service_account == "qwen2-7b-chat-operator-worker"
    assert validate["preconditions"] == mutate["preconditions"]
    # the IEC's pods run as exactly that service account; self-managed engines do not
    iec = InferenceEndpointConfigChart(app, "i", props=operator_props).to_json()
    assert next(o for o in iec if o["kind"] == "InferenceEndpointConfig")["spec"]["kubernetes"]["serviceAccountName"] == condition["value"]
    for name in ("llama31-70b", "qwen25-32b"):
        objs = ServingChart(app, f"s-{name}", props=ServingProps.from_environment(prod, name)).to_json()
        accounts = {o["spec"]["template"]["spec"].get("serviceAccountName") for o in objs if o["kind"] == "Deployment"}
        assert condition["value"] not in accounts
    # one source of truth for the L2: the same L2Settings the self-managed LMCache config uses
    l2 = L2Settings.from_environment(prod)
    patch = mutate["mutate"]["patchStrategicMerge"]["spec"]
    env = {e["name"]: e["value"] for e in patch["containers"][0]["env"]}
    namespace = L2Namespace.for_endpoint(prod, next(e for e in prod.serving.endpoints if e.name == "qwen2-7b-chat"))
    assert operator_props.l2_namespace == namespace
    assert env == {
        "LMCACHE_REMOTE_URL": l2.remote_url(namespace), "LMCACHE_REMOTE_SERDE": l2.serde, "PYTHONHASHSEED": l2.hash_seed
    }
    assert patch["containers"][0]["volumeMounts"][0]["mountPath"] == l2.mount_path
    assert patch["volumes"][0]["persistentVolumeClaim"]["claimName"] == l2.claim_name
    self_managed = ServingProps.from_environment(prod, "llama31-70b")
    llama = L2Namespace.for_endpoint(prod, next(e for e in prod.serving.endpoints if e.name == "llama31-70b"))
    assert self_managed.lmcache.remote_url == l2.remote_url(llama) and self_managed.l2 == l2


def test_addons_are_pinned_configured_and_ordered(prod_synth, prod):
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    operator_addons = ("cert-manager", "aws-mountpoint-s3-csi-driver", "aws-fsx-csi-driver", "metrics-server",
                       "amazon-sagemaker-hyperpod-inference")
    addons = {r["Properties"]["AddonName"]: (k, r) for k, r in resources.items()
              if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] in operator_addons}
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
    role = next(r for r in resources.values() if r["Type"] == "AWS::IAM::Role" and str(r["Properties"].get("RoleName", "")).startswith("SageMakerHyperPodInference"))
    assert any("AmazonSageMakerHyperPodInferenceAccess" in json.dumps(a) for a in role["Properties"]["ManagedPolicyArns"])
    # the operator after the HyperPod cluster, Kyverno after the operator (platform stack); the policy before the
    # endpoint (workloads stack, which deploys after the platform stack)
    hyperpod = next(k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::Cluster")
    assert hyperpod in operator["DependsOn"]
    kyverno = next(k for k, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kyverno")
    assert operator_id in resources[kyverno]["DependsOn"]
    workloads = prod_synth.template_json(prod_synth.graph.workloads)["Resources"]
    policy = next(k for k in workloads if k.startswith("L2PolicyQwen27bChat"))
    endpoint = next(k for k in workloads if k.startswith("OperatorEndpointQwen27bChat"))
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
    message = rejected(tmp_path, lambda raw: set_path(raw, "serving.endpoints.0.instance_group", "g6e-other"))
    assert "instance_group 'g6e-other' is not a HyperPod instance group" in message
