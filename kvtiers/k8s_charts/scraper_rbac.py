"""What the managed metrics collector may read in the cluster: pods (for discovery) in the namespaces it scrapes.

AWS's managed-collector set-up binds a ClusterRole to the user its access entry maps to. Here the ClusterRole holds
only ``get/list/watch`` on pods, and it is bound per namespace (RoleBindings), so the collector sees the serving
and Curvine pods and nothing else; its scrape configuration limits discovery to exactly these namespaces.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers.k8s_charts.names import PART_OF, PART_OF_KEY

ROLE = "kvtiers-metrics-collector"


class ScraperRbacChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, user: str, namespaces: tuple[str, ...]) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        labels = {PART_OF_KEY: PART_OF}
        k8s.KubeClusterRole(
            self,
            "role",
            metadata=k8s.ObjectMeta(name=ROLE, labels=labels),
            rules=[k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"])],
        )
        for namespace in namespaces:
            k8s.KubeRoleBinding(
                self,
                f"binding-{namespace}",
                metadata=k8s.ObjectMeta(name=ROLE, namespace=namespace, labels=labels),
                role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ROLE),
                subjects=[k8s.Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
            )
