"""Kubernetes ``IntOrString`` values (ports, target ports), one jsii object per value for the whole process: every
chart names the same few ports, and each new object is a round trip to the jsii runtime."""

from __future__ import annotations

from functools import cache

from cdk8s_plus_33 import k8s


@cache
def int_or_string(value: int | str) -> k8s.IntOrString:
    return k8s.IntOrString.from_number(value) if isinstance(value, int) else k8s.IntOrString.from_string(value)
