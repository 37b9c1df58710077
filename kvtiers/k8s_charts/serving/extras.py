"""Escape hatches: arguments and environment variables the props do not model, appended to kvtiers' own (as
production-stack's ``extraArgs`` and ``env``). What kvtiers already sets is refused, never overridden: a second
``--max-model-len`` or ``PYTHONHASHSEED`` would silently win or lose depending on the program's parser, and the
sizing, the L2 namespace and the router's discovery rely on kvtiers' values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdk8s_plus_33 import k8s


def _flag(arg: str) -> str:
    return arg.split("=", 1)[0]


def with_extra_args(owner: str, args: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``args`` then ``extra``; an ``extra`` flag that ``args`` holds is an error naming both."""
    own = {_flag(arg): i for i, arg in enumerate(args) if arg.startswith("--")}
    for arg in extra:
        if not arg:
            raise ValueError(f"{owner}: extra_args has an empty argument")
        flag = _flag(arg)
        if flag in own:
            i = own[flag]
            value = args[i + 1] if "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--") else ""
            setting = f"{flag} {value}".strip() if "=" not in args[i] else args[i]
            raise ValueError(
                f"{owner}: extra_args {arg!r} sets {flag}, which kvtiers already sets ({setting!r}); change it through "
                f"the {owner} field that sets it"
            )
    return [*args, *extra]


def with_extra_env(owner: str, env: Sequence[k8s.EnvVar], extra: Mapping[str, str]) -> list[k8s.EnvVar]:
    """``env`` then ``extra``; an ``extra`` variable that ``env`` holds is an error naming both."""
    own = {var.name: var for var in env}
    for name in extra:
        if not name:
            raise ValueError(f"{owner}: extra_env has an empty variable name")
        if name in own:
            value = own[name].value if own[name].value is not None else "(from the pod)"
            raise ValueError(
                f"{owner}: extra_env {name}={extra[name]!r} sets {name}, which kvtiers already sets ({name}={value})"
            )
    return [*env, *(k8s.EnvVar(name=name, value=value) for name, value in extra.items())]
