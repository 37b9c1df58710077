"""The serving namespace, applied first so every later chart (the L2 claim, endpoints, routers) can use it."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers.k8s_charts.labels import PART_OF, PART_OF_KEY


class NamespaceChart(cdk8s.Chart):
    """One ``Namespace`` per name, labelled as part of kvtiers."""

    def __init__(self, scope: Construct, id: str, *, names: tuple[str, ...]) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        if not names:
            raise ValueError("NamespaceChart needs at least one namespace name")
        for name in names:
            k8s.KubeNamespace(self, name, metadata=k8s.ObjectMeta(name=name, labels={PART_OF_KEY: PART_OF}))
