"""The admission check that an operator endpoint's model servers run kvtiers' KV connector (the L2 guard): CEL over
each model-server container's final ``command`` and ``args``, as the pod reaches admission.

The operator adds its own LMCache wiring to the worker (``enableL1Cache``; aws/sagemaker-hyperpod-cli#431 shows it
rewriting the worker's LMCache environment), and how it passes its connector is not public. Whatever it adds, vLLM
0.12.0 must end up with kvtiers' ``--kv-transfer-config``. What decides it (``vllm/utils/argparse_utils.py``,
``FlexibleArgumentParser.parse_args``, and Python's argparse under it):

- argparse keeps the last value of an option; a unique prefix of an option is that option (abbreviations are on:
  ``--kv-t`` is ``--kv-transfer-config``, ``--kv-`` is ambiguous and refused by vLLM itself);
- underscores in an option's name become dashes (``--kv_transfer_config``); ``--opt=value`` is one argument;
- a dotted option (``--kv-transfer-config.kv_connector X``) is collected and appended after every other argument, so
  it wins wherever it stands;
- ``--config FILE`` (that exact argument) inserts the YAML file's keys as options, dotted ones included;
- ``--kv-offloading-backend`` replaces the connector after parsing (``vllm/config/vllm.py``,
  ``_post_init_kv_transfer_config``); vLLM reads no environment variable for the connector (``vllm/envs.py``).

The operator does add one: a pod it rendered (LMCache/LMCache#2732) ends its args with ``--kv-transfer-config
'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'`` (two arguments, after the user's), and AWS's
``kvCacheSpec`` samples pass none in ``worker.args``. So the policy first appends kvtiers' ``--kv-transfer-config=<json>``
as the model server's last argument (a Kyverno ``foreach`` JSON patch per model-server container, at the container's
index; Kyverno's mutating webhook runs before its validating one), which argparse then takes whatever came before.
The append is skipped when the last argument already is kvtiers' (a webhook re-invocation appends nothing), and a
container with a ``command`` but no ``args`` gets ``args`` of that one argument (Kubernetes appends ``args`` to
``command``); a container with neither runs the image's own command, which kvtiers does not render, and is refused.

The check is the backstop for what appending cannot override: it admits a model server when the last plain
occurrence of the option in its ``args`` is exactly kvtiers' and nothing in ``command`` or ``args`` can override it
at run time: no dotted form, no kv-offloading option, no ``--config``, no ``$(VAR)`` substitution (Kubernetes expands
it from the environment, envFrom and valueFrom included, which the check cannot read), no shell as the command (it
builds the arguments at run time) and no command mentioning the option but as a plain option (an interpreter's
script text). In ``args``
only option-looking arguments count (``--`` then a name vLLM's parser would read as one of these options), so a
value such as ``--served-model-name=acme-kv-tuned`` passes. It cannot see inside the image: an entrypoint that
rewrites its arguments is the image's, and kvtiers' engine image runs vLLM's own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvtiers.k8s_charts.vllm import KV_TRANSFER_CONFIG_OPTION as KV_TRANSFER_CONFIG

SHORTEST_KV_TRANSFER_CONFIG = "--kv-t"
"""The shortest unique abbreviation: vLLM 0.12.0's other ``--kv-`` options are ``--kv-cache-*``, ``--kv-sharing-*``,
``--kv-offloading-*`` and ``--kv-events-config`` (``vllm/engine/arg_utils.py``)."""
KV_OFFLOADING = "--kv-o"
"""The shortest abbreviation of a ``--kv-offloading-*`` option (``--kv-offloading-backend``, ``--kv-offloading-size``)."""
KV_OFFLOADING_PREFIX = "--kv-offloading-"
CONFIG_FILE = "--config"
SHELLS = r"^(.*/)?(sh|bash|dash|ash|zsh|ksh)$"


def _name(option: str) -> str:
    """RE2 for an option name as vLLM's parser reads it: a dash may be an underscore."""
    return "".join("[-_]" if ch == "-" else re.escape(ch) for ch in option[2:])


def option_pattern(shortest: str, full: str) -> str:
    """RE2 for ``--<name>`` where name is any prefix of ``full`` from ``shortest`` on (unanchored at the end)."""
    rest = full[len(shortest) :]
    optional = ""
    for ch in reversed(rest):
        optional = f"({_name('--' + ch)}{optional})?"
    return f"^--{_name(shortest)}{optional}"


PLAIN = option_pattern(SHORTEST_KV_TRANSFER_CONFIG, KV_TRANSFER_CONFIG) + "(=.*)?$"
"""An argument that sets ``--kv-transfer-config`` (alone, or ``=value``)."""
DOTTED = option_pattern(SHORTEST_KV_TRANSFER_CONFIG, KV_TRANSFER_CONFIG) + r"\."
OFFLOADING = f"^--{_name(KV_OFFLOADING_PREFIX)}|{option_pattern(KV_OFFLOADING, KV_OFFLOADING_PREFIX)}([=.].*)?$"
"""An argument vLLM's parser reads as a ``--kv-offloading-*`` option: the options' common part abbreviated, or any
name beginning with it."""
MENTION = f"{_name(SHORTEST_KV_TRANSFER_CONFIG)}|{_name(KV_OFFLOADING)}"
"""The option's or kv-offloading's name anywhere in an argument (for ``command``, which may be an interpreter's
script)."""
KYVERNO_SPECIAL = ("{{", "$(", "*", "?")
"""What Kyverno reads in a precondition value or a patch (variables, references, Equals' wildcards): kvtiers' JSON
has none, and the mutation refuses one that would."""


def _cel(value: str) -> str:
    return json.dumps(value)


def _each(field: str, condition: str) -> str:
    """``condition`` (over ``t``) for every argument of every model server's ``field`` (``command`` or ``args``)."""
    return f"variables.modelServers.all(c, !has(c.{field}) || c.{field}.all(t, {condition}))"


def kv_connector_expressions(kv_transfer_config: str) -> list[dict[str, Any]]:
    """CEL expressions (with the ``modelServers`` variable of policy.py) that refuse a pod whose model server's
    effective ``--kv-transfer-config`` may not be ``kv_transfer_config`` (the endpoint's JSON)."""
    expected = f"{KV_TRANSFER_CONFIG}={kv_transfer_config}"
    plain = f"c.args.filter(t, t.matches({_cel(PLAIN)}))"
    effective = f"{plain}[size({plain}) - 1]"
    return [
        {
            "expression": f"variables.modelServers.all(c, has(c.args) && size({plain}) > 0 && {effective} == "
            f"{_cel(expected)})",
            "message": f"a model server's last --kv-transfer-config argument is not kvtiers' {expected!r}: vLLM "
            "takes the last one, and another connector bypasses the L2 guard",
        },
        *(
            {
                "expression": _each(field, f"!t.matches({_cel(DOTTED)})"),
                "message": f"a model server's {field} set a field of --kv-transfer-config with a dotted option: vLLM "
                "applies it after every other argument",
            }
            for field in ("command", "args")
        ),
        *(
            {
                "expression": _each(field, f"!t.matches({_cel(OFFLOADING)})"),
                "message": f"a model server's {field} set a --kv-offloading option: vLLM then replaces the "
                "--kv-transfer-config connector",
            }
            for field in ("command", "args")
        ),
        *(
            {
                "expression": _each(field, f"t != {_cel(CONFIG_FILE)}"),
                "message": f"a model server's {field} pass --config: the file's options (a --kv-transfer-config "
                "among them) cannot be checked at admission",
            }
            for field in ("command", "args")
        ),
        *(
            {
                "expression": _each(field, "!t.contains('$(')"),
                "message": f"a model server's {field} hold a $(VAR) substitution: Kubernetes fills it from the "
                "environment at start, where a --kv-transfer-config cannot be checked",
            }
            for field in ("command", "args")
        ),
        {
            # A plain option is overridden by the appended argument (args follow command); any other mention may
            # be an interpreter's script text.
            "expression": _each(
                "command",
                f"!t.matches({_cel(SHELLS)}) && t != '-c' && (t.matches({_cel(PLAIN)}) || !t.matches({_cel(MENTION)}))",
            ),
            "message": "a model server's command runs a shell or a script mentioning --kv-transfer-config or "
            "--kv-offloading, which builds the arguments at run time: the effective --kv-transfer-config cannot be "
            "checked",
        },
    ]


def _kyverno_literal(value: str) -> str:
    for special in KYVERNO_SPECIAL:
        if special in value:
            raise ValueError(
                f"kv_transfer_config: Kyverno would read {special!r} in {value!r} as a variable or pattern"
            )
    return value


def kv_connector_mutations(kv_transfer_config: str, *, is_model_server: dict[str, Any]) -> list[dict[str, Any]]:
    """Kyverno ``foreach`` entries (over ``request.object.spec.containers``) that make kvtiers'
    ``--kv-transfer-config=<json>`` the last argument of every container ``is_model_server`` (a precondition) selects:
    appended to ``args``, or as the only argument of a container with a ``command`` and no ``args``. Nothing is added
    when the last argument already is kvtiers' (idempotent on a webhook re-invocation). JSON patches at the
    container's ``elementIndex``, in list order (Kyverno v1.15.2 ``pkg/engine/handlers/mutation/common.go``)."""
    expected = _kyverno_literal(f"{KV_TRANSFER_CONFIG}={kv_transfer_config}")
    container = "/spec/containers/{{ elementIndex }}/args"

    def has(field: str, present: bool) -> dict[str, Any]:
        return {"key": f"{{{{ contains(keys(element), '{field}') }}}}", "operator": "Equals", "value": present}

    def entry(conditions: list[dict[str, Any]], path: str, value: Any) -> dict[str, Any]:
        return {
            "list": "request.object.spec.containers",
            "preconditions": {"all": [is_model_server, *conditions]},
            "patchesJson6902": json.dumps([{"op": "add", "path": path, "value": value}]),
        }

    return [
        entry(
            [
                has("args", True),
                # Prefixed: Kyverno compares a key that parses as a quantity or a duration ("4096", the value of
                # --max-model-len in AWS's samples) as one, and NotEquals with a non-quantity is then false
                # (pkg/engine/variables/operator/notequal.go @ v1.15.2).
                {"key": "last={{ element.args[-1] || '' }}", "operator": "NotEquals", "value": f"last={expected}"},
            ],
            f"{container}/-",
            expected,
        ),
        entry([has("args", False), has("command", True)], container, [expected]),
    ]
