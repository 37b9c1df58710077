"""Argument checks shared by the constructs: each error names the construct (or value object) and the argument."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import fields
from typing import Any, get_args

import aws_cdk as cdk

STRING_TOKEN_MARKER = "${Token["
"""How aws-cdk-lib encodes a token inside a string: a string without it is resolved, no jsii round trip needed."""


def unresolved(value: str) -> bool:
    """A deploy-time value (a CDK token): its format can only be checked by CloudFormation."""
    return STRING_TOKEN_MARKER in value and bool(cdk.Token.is_unresolved(value))


def one_of(owner: str, name: str, value: object, choices: Any) -> None:
    """``value`` is one of the members of the ``Literal`` type ``choices``."""
    allowed = get_args(choices)
    if value not in allowed:
        raise ValueError(f"{owner}: {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def matches(owner: str, name: str, value: str, pattern: str, what: str) -> None:
    """``value`` matches ``pattern`` unless it is a token."""
    if not unresolved(value) and not re.match(pattern, value):
        raise ValueError(f"{owner}: {name} {value!r} is not {what}")


def in_range(owner: str, name: str, value: int, low: int, high: int | None = None) -> None:
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"{low} to {high}"
        raise ValueError(f"{owner}: {name} must be {bounds}, got {value}")


def ipv4_network(owner: str, name: str, value: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(value)
    except ValueError:
        raise ValueError(f"{owner}: {name} {value!r} is not an IPv4 CIDR such as '10.0.0.0/16'") from None


def distinct(owner: str, name: str, values: Iterable[object]) -> None:
    seen: list[object] = []
    for value in values:
        if value in seen:
            raise ValueError(f"{owner}: {name} must be unique, {value!r} appears twice")
        seen.append(value)


def exact_addon_versions(versions: Any, pattern: str, example: str) -> None:
    """Every field of the dataclass ``versions`` is an exact EKS add-on version."""
    owner = type(versions).__name__
    for f in fields(versions):
        version = getattr(versions, f.name)
        if not re.match(pattern, version):
            raise ValueError(f"{owner}: {f.name} {version!r} is not an EKS add-on version like {example!r}")
