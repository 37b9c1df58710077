"""An operator endpoint's pods run vLLM with kvtiers' KV connector (the L2 guard), whatever the operator adds to the
model server's arguments: the admission policy appends kvtiers' ``--kv-transfer-config`` as the model server's last
argument, then reads the container's final command and arguments and refuses a pod whose effective
``--kv-transfer-config`` may still not be kvtiers'.

vLLM 0.12.0's parser (``vllm/utils/argparse_utils.py``, ``FlexibleArgumentParser.parse_args``) is argparse with
abbreviations on, turns underscores into dashes in option names, appends every dotted ``--opt.key`` option after all
others, and reads a ``--config`` YAML file whose keys become options; argparse keeps the last value of an option.
``--kv-offloading-backend`` rewrites the connector after parsing (``vllm/config/vllm.py``,
``_post_init_kv_transfer_config``). The operator's own wiring is closed source, but a pod it rendered
(LMCache/LMCache#2732) ends its args with ``--kv-transfer-config '<LMCache's connector>'`` after the user's, and
aws/sagemaker-hyperpod-cli#431 shows it rewriting the worker's LMCache environment; each case below is one way it
could add its connector, in both orders. The effective value is read with vLLM 0.12.0's own parser
(``FlexibleArgumentParser.parse_args`` from the engine image's wheel).

The pods go through the policy with the offline engines of tests/fakes/kyverno.py (kubectl's kustomize for the
mutation, cel-python with RE2 for the CEL check): no Kyverno engine installs from the package registries.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import types

import pytest

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts.hyperpod_operator import policy
from tests.conftest import CONFIG_DIR
from tests.fakes import kyverno
from tests.fakes.operator_pod import OPERATOR_KV_TRANSFER_CONFIG, model_container_name, operator_pod
from tests.upstream import vllm_source

OPERATORS = json.dumps(OPERATOR_KV_TRANSFER_CONFIG)


@pytest.fixture(scope="module")
def props():
    return model.operator_endpoint(load_environment(CONFIG_DIR / "prod.yaml"), "qwen2-7b-chat")


@pytest.fixture(scope="module")
def l2_policy(props):
    return policy(props)


def model_server(pod: dict, props) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == model_container_name(props))


def with_args(props, *, before: list[str] = (), after: list[str] = (), command: list[str] | None = None) -> dict:
    pod = operator_pod(props)
    server = model_server(pod, props)
    server["args"] = [*before, *server["args"], *after]
    if command is not None:
        server["command"] = command
    return pod


@pytest.fixture(scope="module")
def vllm_parser_class(tmp_path_factory):
    """vLLM 0.12.0's ``FlexibleArgumentParser`` (the module's only vLLM import, its logger, stood in by logging)."""
    source = tmp_path_factory.mktemp("vllm") / "argparse_utils.py"
    source.write_text(vllm_source("vllm/utils/argparse_utils.py"))
    logger_module = types.ModuleType("vllm.logger")
    logger_module.init_logger = logging.getLogger  # type: ignore[attr-defined]
    saved = sys.modules.get("vllm.logger")
    sys.modules["vllm.logger"] = logger_module
    try:
        spec = importlib.util.spec_from_file_location("vllm_argparse_utils", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["vllm.logger"]
        else:
            sys.modules["vllm.logger"] = saved
    return module.FlexibleArgumentParser


@pytest.fixture
def effective_kv_transfer_config(vllm_parser_class):
    """What vLLM's parser makes of ``args`` for ``--kv-transfer-config`` (other options are ignored)."""

    class OnlyTheConnector(vllm_parser_class):
        def parse_known_args(self, args=None, namespace=None):
            return super().parse_known_args(args, namespace)[0], []

    def parse(args: list[str]) -> dict:
        parser = OnlyTheConnector()
        parser.add_argument("model_tag", nargs="?")
        parser.add_argument("--kv-transfer-config", type=json.loads)
        return parser.parse_args(args).kv_transfer_config

    return parse


def kv_messages(l2_policy, pod) -> list[str]:
    return [m for m in kyverno.validate(l2_policy, pod) if "kv-transfer-config" in m]


def test_kvtiers_own_arguments_name_the_l2_guard_once_in_one_argument(props):
    args = props.spec()["worker"]["args"]
    flags = [a for a in args if a.startswith("--kv-transfer-config")]
    assert flags == [f"--kv-transfer-config={props.lmcache.kv_transfer_config}"]
    assert json.loads(flags[0].split("=", 1)[1])["kv_connector_module_path"] == "kvtiers_l2_guard"


def test_the_operator_pod_as_kvtiers_renders_it_is_admitted(kubectl, l2_policy, props):
    assert kyverno.admit(kubectl, l2_policy, operator_pod(props)).reviewed


def admitted_args(kubectl, l2_policy, props, pod) -> list[str]:
    return model_server(kyverno.admit(kubectl, l2_policy, pod).pod, props)["args"]


@pytest.mark.parametrize("order", ["kvtiers-then-operator", "operator-then-kvtiers"])
def test_the_operator_pod_of_lmcache_2732_is_admitted_with_kvtiers_connector_in_effect(
    kubectl, l2_policy, props, order, effective_kv_transfer_config
):
    # LMCache/LMCache#2732: the operator's pod ends with its own connector, two arguments after the user's.
    operators = ["--tensor-parallel-size", "4", "--kv-transfer-config", OPERATORS]
    pod = with_args(props, after=operators) if order == "kvtiers-then-operator" else with_args(props, before=operators)
    as_rendered = effective_kv_transfer_config(model_server(pod, props)["args"])
    kvtiers_last = order == "operator-then-kvtiers"
    assert as_rendered == (
        json.loads(props.lmcache.kv_transfer_config) if kvtiers_last else OPERATOR_KV_TRANSFER_CONFIG
    )
    args = admitted_args(kubectl, l2_policy, props, pod)
    assert args[-1] == f"--kv-transfer-config={props.lmcache.kv_transfer_config}"
    assert effective_kv_transfer_config(args) == json.loads(props.lmcache.kv_transfer_config)


def test_an_operator_connector_followed_by_a_number_is_overridden(
    kubectl, l2_policy, props, effective_kv_transfer_config
):
    # AWS's samples end worker.args with `--max-model-len 4096`: a last argument Kyverno would compare as a quantity.
    pod = with_args(props, after=["--kv-transfer-config", OPERATORS, "--max-model-len", "4096"])
    args = admitted_args(kubectl, l2_policy, props, pod)
    assert effective_kv_transfer_config(args) == json.loads(props.lmcache.kv_transfer_config)


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
@pytest.mark.parametrize("where", ["before", "after"])
def test_an_operator_connector_in_any_spelling_and_place_is_overridden(
    kubectl, l2_policy, props, added, where, effective_kv_transfer_config
):
    pod = with_args(props, **{where: added})
    args = admitted_args(kubectl, l2_policy, props, pod)
    assert effective_kv_transfer_config(args) == json.loads(props.lmcache.kv_transfer_config)


def test_kvtiers_connector_already_last_is_not_appended_again(kubectl, l2_policy, props):
    # A webhook re-invocation (or the pod as kvtiers renders it) sees kvtiers' argument last: nothing is added.
    once = kyverno.admit(kubectl, l2_policy, with_args(props, after=["--kv-transfer-config", OPERATORS])).pod
    twice = kyverno.admit(kubectl, l2_policy, once).pod
    assert model_server(twice, props)["args"] == model_server(once, props)["args"]
    rendered = operator_pod(props)
    assert admitted_args(kubectl, l2_policy, props, rendered) == model_server(rendered, props)["args"]


def test_a_model_server_with_only_a_command_gets_kvtiers_connector_as_its_argument(
    kubectl, l2_policy, props, effective_kv_transfer_config
):
    # Kubernetes runs command + args: the operator moving everything into command still ends with kvtiers'.
    pod = operator_pod(props)
    server = model_server(pod, props)
    server["command"] = ["vllm", "serve", *server.pop("args"), "--kv-transfer-config", OPERATORS]
    args = admitted_args(kubectl, l2_policy, props, pod)
    assert args == [f"--kv-transfer-config={props.lmcache.kv_transfer_config}"]
    assert effective_kv_transfer_config([*server["command"][2:], *args]) == json.loads(props.lmcache.kv_transfer_config)


def test_a_model_server_with_neither_command_nor_args_is_refused(kubectl, l2_policy, props):
    # It would run the image's own command, which kvtiers does not render; adding args would replace its CMD.
    pod = operator_pod(props)
    del model_server(pod, props)["args"]
    with pytest.raises(kyverno.Denied, match="kv-transfer-config"):
        kyverno.admit(kubectl, l2_policy, pod)


def test_the_sidecar_gets_no_connector_argument(kubectl, l2_policy, props):
    pod = kyverno.admit(kubectl, l2_policy, operator_pod(props)).pod
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] != model_container_name(props))
    assert "args" not in sidecar


@pytest.mark.parametrize(
    "added",
    [
        ["--served-model-name=acme-kv-tuned"],
        ["--served-model-name", "acme-kv-tuned", "--chat-template", "/opt/ml/model/kv_offload_notes.jinja"],
        ["--kv-cache-dtype", "fp8"],
    ],
    ids=["kv-t-in-a-value", "kv-o-and-kv_t-in-values", "another-kv-option"],
)
def test_values_and_other_options_that_merely_mention_kv_are_admitted(kubectl, l2_policy, props, added):
    assert kyverno.admit(kubectl, l2_policy, with_args(props, after=added)).reviewed


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


def test_the_check_alone_still_refuses_an_operator_connector_last(l2_policy, props):
    # The backstop, should the mutation not run: the validation refuses what it did not fix.
    pod = with_args(props, after=["--kv-transfer-config", OPERATORS])
    assert kv_messages(l2_policy, pod)
    assert not kv_messages(l2_policy, operator_pod(props))
