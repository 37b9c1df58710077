"""The endpoints of one app, per cluster and namespace: the rules that join endpoints built by separate constructs
(one name per namespace; one L2 namespace per share group), checked as each endpoint is built."""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from kvtiers.constructs.eks_cluster import cluster_key
from kvtiers.k8s_charts.l2 import L2Namespace


@dataclass(frozen=True)
class _Member:
    path: str
    name: str
    l2_namespace: L2Namespace
    serving: str


_REGISTRIES: weakref.WeakKeyDictionary[IConstruct, dict[tuple[str, str, str], _Member]] = weakref.WeakKeyDictionary()


def register_endpoint(
    scope: Construct,
    where: str,
    *,
    cluster: eks.ICluster,
    namespace: str,
    name: str,
    l2_namespace: L2Namespace,
    serving: str,
    l2_share_group: str | None,
) -> None:
    """Record the endpoint ``name`` built at ``scope``: refused when the app already has an endpoint of that name in
    ``namespace`` of the same cluster (their objects and Pod Identity associations would collide), or when its share
    group's first member has another L2 namespace or serving path (``serving``: LMCache names chunks by the model
    path, which differs between the two paths)."""
    registry = _REGISTRIES.setdefault(scope.node.root, {})
    which = cluster_key(cdk.Stack.of(cluster), cluster.cluster_name)
    member = _Member(path=scope.node.path, name=name, l2_namespace=l2_namespace, serving=serving)
    other = registry.setdefault((which, namespace, f"endpoint/{name}"), member)
    if other is not member:
        raise ValueError(
            f"{where}: another endpoint of this app is named {name!r} in namespace {namespace!r} of the same cluster; "
            "endpoint names are unique per namespace (their objects and Pod Identity associations would collide). "
            f"The other: {other.path}"
        )
    if l2_share_group is None:
        return
    first = registry.setdefault((which, namespace, f"share-group/{l2_share_group}"), member)
    differ = [
        f.name
        for f in dataclasses.fields(L2Namespace)
        if getattr(first.l2_namespace, f.name) != getattr(l2_namespace, f.name)
    ]
    if first.serving != serving:
        differ.append("serving path (LMCache names chunks by the model path, which differs between the two)")
    if differ:
        raise ValueError(
            f"{where}: l2_share_group {l2_share_group!r}: {first.name!r} and {name!r} differ in {', '.join(differ)}; "
            "only endpoints of one model, weights location, revision, dtype, tensor_parallel_size, "
            "pipeline_parallel_size and serving path (one L2 namespace) may share an L2 directory"
        )
