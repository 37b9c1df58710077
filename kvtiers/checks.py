"""The checks every construct, chart and value object runs on its inputs when it is built, with one error format:
``<owner>: <field> <problem>``, the owner being the construct or value object's class. Literal types are not
enforced at run time: a caller without a type checker gets these errors instead.

Free of CDK imports at module level: the charts' side (cdk8s) and the constructs' side (aws-cdk-lib) both use it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import fields
from typing import Any, Literal, get_args, get_origin

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PYTHON_HASH_SEED = re.compile(r"^\d{1,10}$")
MAX_HASH_SEED = 4294967295
"""``PYTHONHASHSEED`` is an integer from 0 to 2**32 - 1."""
STRING_TOKEN_MARKER = "${Token["
"""How aws-cdk-lib encodes a token inside a string: a string without it is resolved, no jsii round trip needed."""
_PINNED_IMAGE = re.compile(
    r"^[a-z0-9][a-z0-9._\-/:]*[a-z0-9](:[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}|@sha256:[a-f0-9]{64})$"
)
_ABSOLUTE_PATH = re.compile(r"^/[^\s]+$")
_HUB_REPO_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b$")
"""huggingface_hub 0.34.0's repository id pattern (``utils/_validators.py`` ``REPO_ID_REGEX``)."""


def owner_name(owner: object) -> str:
    return owner if isinstance(owner, str) else type(owner).__name__


def invalid(owner: object, field: str, problem: str) -> ValueError:
    """The error for ``field`` of ``owner`` (a name, or the object whose class names it)."""
    return ValueError(f"{owner_name(owner)}: {field} {problem}")


def unresolved(value: str) -> bool:
    """A deploy-time value (a CDK token): its format can only be checked by CloudFormation."""
    if STRING_TOKEN_MARKER not in value:
        return False
    import aws_cdk as cdk

    return bool(cdk.Token.is_unresolved(value))


def one_of(owner: object, field: str, value: object, choices: Any) -> None:
    """``value`` is one of ``choices``: a ``Literal`` type or a sequence of values."""
    allowed = get_args(choices) if get_origin(choices) is Literal else tuple(choices)
    if value not in allowed:
        raise invalid(owner, field, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def matches(owner: object, field: str, value: str, pattern: str, what: str) -> None:
    """``value`` matches ``pattern`` unless it is a token."""
    if not unresolved(value) and not re.match(pattern, value):
        raise invalid(owner, field, f"{value!r} is not {what}")


def in_range(owner: object, field: str, value: float, low: float, high: float | None = None) -> None:
    if value < low or (high is not None and value > high):
        bounds = f"at least {low:g}" if high is None else f"{low:g} to {high:g}"
        raise invalid(owner, field, f"must be {bounds}, got {value:g}")


def ipv4_network(owner: object, field: str, value: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(value)
    except ValueError:
        raise invalid(owner, field, f"{value!r} is not an IPv4 CIDR such as '10.0.0.0/16'") from None


def distinct(owner: object, field: str, values: Iterable[object]) -> None:
    seen: list[object] = []
    for value in values:
        if value in seen:
            raise invalid(owner, field, f"must be unique, {value!r} appears twice")
        seen.append(value)


def dns_label(owner: object, field: str, value: str, max_length: int = 63) -> None:
    if not DNS_LABEL.match(value) or len(value) > max_length:
        raise invalid(
            owner,
            field,
            f"{value!r} is not a DNS-1123 label of at most {max_length} characters (lower-case letters, digits and "
            "'-')",
        )


def hash_seed(owner: object, value: str) -> None:
    if not PYTHON_HASH_SEED.match(value) or int(value) > MAX_HASH_SEED:
        raise invalid(owner, "hash_seed", f"{value!r} is not a PYTHONHASHSEED (an integer from 0 to 4294967295)")


def pinned_image(owner: object, field: str, value: str) -> None:
    """Pinned by tag or digest, never the moving ``latest``."""
    tag = value.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    if tag == "latest":
        raise invalid(owner, field, f"{value!r} uses the moving tag 'latest'; pin a version tag or digest")
    if not _PINNED_IMAGE.match(value):
        raise invalid(owner, field, f"{value!r} has no tag; give 'repository:tag' or 'repository@sha256:<digest>'")


def hub_repo_id_problem(name: str) -> str | None:
    """Why huggingface_hub 0.34.0 refuses ``name`` as a repository id (``validate_repo_id``), or None: at most one
    ``/``, letters, digits, ``-``, ``_``, ``.``, neither ``-`` nor ``.`` at either end, at most 96 characters a part,
    no ``--`` or ``..``, no ``.git`` at the end. The router image's transformers refuses such a name before it looks
    at any cache."""
    if name.count("/") > 1:
        return "has more than one '/'"
    if not _HUB_REPO_ID.match(name):
        return (
            "uses characters other than letters, digits, '-', '_', '.', starts or ends with '-' or '.', or is too long"
        )
    if "--" in name or ".." in name:
        return "contains '--' or '..'"
    if name.endswith(".git"):
        return "ends with '.git'"
    return None


def absolute_path(owner: object, field: str, value: str) -> None:
    if not _ABSOLUTE_PATH.match(value):
        raise invalid(owner, field, f"{value!r} is not an absolute path")


def exact_addon_versions(versions: Any, pattern: str, example: str) -> None:
    """Every field of the dataclass ``versions`` is an exact EKS add-on version."""
    for f in fields(versions):
        version = getattr(versions, f.name)
        if not re.match(pattern, version):
            raise invalid(versions, f.name, f"{version!r} is not an EKS add-on version like {example!r}")
