"""The checks the constructs run on their inputs when they are built. Literal types are not enforced at run time:
a caller without a type checker gets these errors instead, each naming the construct and the field."""

from __future__ import annotations

import ipaddress
import re

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PYTHON_HASH_SEED = re.compile(r"^\d{1,10}$")
MAX_HASH_SEED = 4294967295
"""``PYTHONHASHSEED`` is an integer from 0 to 2**32 - 1."""


def one_of(construct: str, field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{construct}: {field} {value!r} is not one of {', '.join(allowed)}")


def at_least(construct: str, field: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ValueError(f"{construct}: {field} must be at least {minimum:g}, got {value:g}")


def dns_label(construct: str, field: str, value: str, max_length: int = 63) -> None:
    if not DNS_LABEL.match(value) or len(value) > max_length:
        raise ValueError(
            f"{construct}: {field} {value!r} is not a DNS-1123 label of at most {max_length} characters "
            "(lower-case letters, digits and '-')"
        )


def hash_seed(construct: str, value: str) -> None:
    if not PYTHON_HASH_SEED.match(value) or int(value) > MAX_HASH_SEED:
        raise ValueError(f"{construct}: hash_seed {value!r} is not a PYTHONHASHSEED (an integer from 0 to 4294967295)")


def ipv4_cidr(construct: str, field: str, value: str) -> ipaddress.IPv4Network:
    """An IPv4 network without host bits (``10.0.0.0/16``, not ``10.0.0.1/16``)."""
    try:
        return ipaddress.IPv4Network(value)
    except ValueError:
        raise ValueError(f"{construct}: {field} {value!r} is not an IPv4 CIDR such as '10.0.0.0/16'") from None
