"""The serving namespace, applied first so every later chart (the L2 claim, endpoints, routers) can use it, and the
Pod Security Standards labels of every namespace kvtiers creates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers import checks
from kvtiers.k8s_charts.names import PART_OF, PART_OF_KEY

PssLevel = Literal["privileged", "baseline", "restricted"]
PSS_LEVELS: tuple[str, ...] = get_args(PssLevel)
"""Pod Security Standards levels, loosest first."""
DEFAULT_ENFORCE: PssLevel = "baseline"
PSS_PREFIX = "pod-security.kubernetes.io"
PSS_WATCH = "restricted"
"""``warn`` and ``audit`` level of every kvtiers namespace: each pod that falls short of restricted is reported at
admission (a warning to the applier, an audit-log annotation) without being blocked."""


def pod_security_labels(enforce: str) -> dict[str, str]:
    """Labels that enforce ``enforce`` and warn/audit at restricted. ``enforce`` must be the strictest level that
    every pod of the namespace meets, including pods kvtiers does not render (a stricter one would block them)."""
    if enforce not in PSS_LEVELS:
        raise ValueError(f"Pod Security level {enforce!r} is not one of {', '.join(PSS_LEVELS)}")
    return {
        f"{PSS_PREFIX}/enforce": enforce,
        f"{PSS_PREFIX}/enforce-version": "latest",
        f"{PSS_PREFIX}/warn": PSS_WATCH,
        f"{PSS_PREFIX}/warn-version": "latest",
        f"{PSS_PREFIX}/audit": PSS_WATCH,
        f"{PSS_PREFIX}/audit-version": "latest",
    }


def serving_enforce_level(has_operator_endpoints: bool) -> PssLevel:
    """``baseline``: the engines run as root (their image has no other user) but meet baseline. With operator
    endpoints the operator creates pods in this namespace whose security context kvtiers neither renders nor
    knows, so enforcement stays ``privileged`` there (warn/audit still report every deviation)."""
    return "privileged" if has_operator_endpoints else "baseline"


class NamespaceChart(cdk8s.Chart):
    """One ``Namespace`` per name, labelled as part of kvtiers and with its Pod Security level.

    :param names: the namespaces, at least one.
    :param enforce: the Pod Security level each namespace enforces, by name. @default None (every namespace
        ``DEFAULT_ENFORCE``, ``baseline``)
    """

    def __init__(
        self, scope: Construct, id: str, *, names: Sequence[str], enforce: Mapping[str, PssLevel] | None = None
    ) -> None:
        if not names:
            raise ValueError("NamespaceChart: names needs at least one namespace name")
        for name in names:
            checks.dns_label("NamespaceChart", "names", name)
        enforce = enforce or {}
        unknown = sorted(set(enforce) - set(names))
        if unknown:
            raise ValueError(f"NamespaceChart: enforce names {unknown}, which are not in names")
        for level in enforce.values():
            checks.one_of("NamespaceChart", "enforce", level, PSS_LEVELS)
        super().__init__(scope, id, disable_resource_name_hashes=True)
        for name in names:
            ns_labels = {PART_OF_KEY: PART_OF, **pod_security_labels(enforce.get(name, DEFAULT_ENFORCE))}
            k8s.KubeNamespace(self, name, metadata=k8s.ObjectMeta(name=name, labels=ns_labels))
