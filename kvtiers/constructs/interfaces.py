"""What the endpoint constructs need of a HyperPod cluster and of a Curvine L2, built in this app or imported by
attributes from another stack or team (``HyperPodCluster.from_hyperpod_cluster_attributes``,
``CurvineL2.from_curvine_l2_attributes``), as aws-cdk-lib's ``I*`` interfaces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from constructs import Construct

    from kvtiers.constructs.hyperpod_cluster import InstanceGroup
    from kvtiers.k8s_charts.l2 import L2Volume
    from kvtiers.k8s_charts.namespaces import PssLevel
    from kvtiers.placement import NodePlacement


class IHyperPodCluster(Protocol):
    """A HyperPod cluster: its instance groups and the placement of every pod this app puts on them."""

    @property
    def cluster_arn(self) -> str: ...

    @property
    def instance_groups(self) -> tuple[InstanceGroup, ...]: ...

    @property
    def placement(self) -> NodePlacement: ...


class ICurvineL2(Protocol):
    """A Curvine L2: the claim serving pods mount, where it is, the hash seed of every endpoint on it, the HyperPod
    cluster it runs on, and what an endpoint deploys after."""

    @property
    def claim(self) -> L2Volume: ...

    @property
    def serving_namespace(self) -> str: ...

    @property
    def serving_namespace_enforce(self) -> PssLevel | None:
        """The Pod Security level the namespace enforces, when known."""
        ...

    @property
    def hash_seed(self) -> str: ...

    @property
    def hyperpod(self) -> IHyperPodCluster | None: ...

    @property
    def ready(self) -> Construct | None:
        """The claim's manifest, for endpoints of the same app to deploy after; None when it is deployed already."""
        ...
