"""What the managed metrics collector may read in the cluster: pods (for discovery) in the namespaces it scrapes.

AWS's managed-collector set-up binds a ClusterRole to the user its access entry maps to. Here the ClusterRole holds
only ``get/list/watch`` on pods, and it is bound per namespace (RoleBindings), so the collector sees the serving
and Curvine pods and nothing else; its scrape configuration limits discovery to exactly these namespaces.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
import cdk8s_plus_33 as kplus
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers import checks
from kvtiers.k8s_charts.names import PART_OF, PART_OF_KEY

ROLE = "kvtiers-metrics-collector"


class ScraperRbacChart(cdk8s.Chart):
    """A read-only ClusterRole on pods, bound to ``user`` in each of ``namespaces``.

    :param user: the Kubernetes user the collector's access entry maps to.
    :param namespaces: the namespaces it scrapes, at least one.
    """

    def __init__(self, scope: Construct, id: str, *, user: str, namespaces: Sequence[str]) -> None:
        if not user:
            raise ValueError("ScraperRbacChart: user is empty")
        if not namespaces:
            raise ValueError("ScraperRbacChart: namespaces needs at least one namespace")
        for namespace in namespaces:
            checks.dns_label("ScraperRbacChart", "namespaces", namespace)
        super().__init__(scope, id, disable_resource_name_hashes=True)
        labels = {PART_OF_KEY: PART_OF}
        # Not cdk8s-plus's ClusterRole: it writes an empty resourceNames list into the rule.
        k8s.KubeClusterRole(
            self,
            "role",
            metadata=k8s.ObjectMeta(name=ROLE, labels=labels),
            rules=[k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"])],
        )
        role = kplus.ClusterRole.from_cluster_role_name(self, "role-ref", ROLE)
        collector = kplus.User.from_name(self, "user", user)
        for namespace in namespaces:
            binding = kplus.RoleBinding(
                self,
                f"binding-{namespace}",
                role=role,
                metadata=cdk8s.ApiObjectMetadata(name=ROLE, namespace=namespace, labels=labels),
            )
            binding.add_subjects(collector)
