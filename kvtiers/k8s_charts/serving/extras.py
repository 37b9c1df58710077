"""Escape hatches: arguments and environment variables the props do not model, appended to kvtiers' own (as
production-stack's ``extraArgs`` and ``env``). What kvtiers already sets is refused, never overridden: a second
``--max-model-len`` or ``PYTHONHASHSEED`` would silently win or lose depending on the program's parser, and the
sizing, the L2 namespace and the router's discovery rely on kvtiers' values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdk8s_plus_33 import k8s

ENGINE_KV_FLAGS = frozenset(
    {
        "--quantization",
        "--kv-cache-dtype",
        "--calculate-kv-scales",
        "--hf-overrides",
        "--hf-config-path",
        "--revision",
        "--code-revision",
        "--tokenizer-revision",
        "--model-impl",
        "--override-attention-dtype",
    }
)
"""vLLM 0.12.0 options (``vllm/engine/arg_utils.py``) that change the bytes of the KV cache, or the tokens its keys are
hashed from, without changing the L2 namespace (model, revision, dtype, parallelism, chunk size, LMCache version,
seed): endpoints of one model would load each other's chunks as their own. Model them as props instead."""

ENGINE_ENV_PREFIXES = ("LMCACHE_",)
"""LMCache 0.3.11 reads every ``LMCACHE_*`` variable over the configuration file kvtiers writes (L1 size, remote URL,
serde, chunk size): an extra one would override kvtiers' sizing and L2 namespace behind its back."""


def _canonical(arg: str) -> str:
    """The option an argument sets, as vLLM's parser reads it: ``--max_model_len=1`` and ``--kv-transfer-config.x=1``
    set ``--max-model-len`` and ``--kv-transfer-config`` (underscores become dashes; a dotted key sets a JSON field)."""
    flag = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + flag[2:].replace("_", "-")


def _is_short_option(arg: str) -> bool:
    return arg.startswith("-") and not arg.startswith("--") and not arg.lstrip("-").replace(".", "", 1).isdigit()


def with_extra_args(
    owner: str, args: Sequence[str], extra: Sequence[str], *, kv_flags: frozenset[str] = frozenset()
) -> list[str]:
    """``args`` then ``extra``. An ``extra`` option that ``args`` sets (in any spelling the parsers accept: underscores,
    dotted JSON keys, an abbreviation of a long option), a short option (its long form may be one kvtiers sets) or one
    of ``kv_flags`` is an error naming both."""
    own = {_canonical(arg): i for i, arg in enumerate(args) if arg.startswith("--")}
    for arg in extra:
        if not arg:
            raise ValueError(f"{owner}: extra_args has an empty argument")
        if _is_short_option(arg):
            raise ValueError(f"{owner}: extra_args {arg!r} is a short option: use its long form")
        if not arg.startswith("--"):
            continue
        flag = _canonical(arg)
        if flag in kv_flags:
            raise ValueError(
                f"{owner}: extra_args {arg!r} changes the bytes of the KV cache, which the L2 namespace does not "
                "include: endpoints of one model would read each other's chunks"
            )
        abbreviated = next((f for f in own if f != flag and f.startswith(flag)), None)
        if abbreviated is not None:
            raise ValueError(f"{owner}: extra_args {arg!r} abbreviates {abbreviated}, which kvtiers already sets")
        if flag in own:
            i = own[flag]
            value = args[i + 1] if "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--") else ""
            setting = f"{flag} {value}".strip() if "=" not in args[i] else args[i]
            raise ValueError(
                f"{owner}: extra_args {arg!r} sets {flag}, which kvtiers already sets ({setting!r}); change it through "
                f"the {owner} field that sets it"
            )
    return [*args, *extra]


def with_extra_env(
    owner: str, env: Sequence[k8s.EnvVar], extra: Mapping[str, str], *, reserved_prefixes: tuple[str, ...] = ()
) -> list[k8s.EnvVar]:
    """``env`` then ``extra``; an ``extra`` variable that ``env`` holds, or one with a ``reserved_prefixes`` prefix, is
    an error naming both."""
    own = {var.name: var for var in env}
    for name in extra:
        if not name:
            raise ValueError(f"{owner}: extra_env has an empty variable name")
        prefix = next((p for p in reserved_prefixes if name.startswith(p)), None)
        if prefix is not None:
            raise ValueError(
                f"{owner}: extra_env {name}={extra[name]!r}: LMCache reads {prefix}* over the configuration kvtiers "
                "writes; change it through the props"
            )
        if name in own:
            value = own[name].value if own[name].value is not None else "(from the pod)"
            raise ValueError(
                f"{owner}: extra_env {name}={extra[name]!r} sets {name}, which kvtiers already sets ({name}={value})"
            )
    return [*env, *(k8s.EnvVar(name=name, value=value) for name, value in extra.items())]
