"""The environment's self-managed endpoints as constructs (and, for tests, charts), from the props of
:mod:`kvtiers.config.model`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtiers.config import model
from kvtiers.config.schema import Environment

if TYPE_CHECKING:
    from collections.abc import Sequence

    from constructs import Construct

    from kvtiers.constructs.curvine import CurvineL2
    from kvtiers.constructs.eks_cluster import EksCluster
    from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi
    from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
    from kvtiers.constructs.network import HyperPodNetwork
    from kvtiers.constructs.serving import ServingEndpoint
    from kvtiers.k8s_charts.scraper_rbac import ScraperRbacChart
    from kvtiers.k8s_charts.serving import ServingChart


def serving_chart(
    scope: Construct, id: str, env: Environment, name: str, *, model_role_arn: str | None = None
) -> ServingChart:
    """The self-managed endpoint ``name``: engines with the L2 when the sizing turned it on, and the router."""
    from kvtiers.constructs.serving import tolerating_taints
    from kvtiers.k8s_charts.serving import ServingChart

    e = model._serving(env, name, "self_managed")
    taints = ((t.key, t.value, t.effect) for t in env.hyperpod.group(e.instance_group).taints)
    return ServingChart(
        scope,
        id,
        name=e.name,
        namespace=env.serving.namespace,
        engine=tolerating_taints(model.engine(env, e, model_role_arn=model_role_arn), taints),
        router=model.router(env, e),
        hash_seed=env.serving.hash_seed,
        l2=model.l2_volume(env) if model.sizing(env).endpoint(name).l2_enabled else None,
        l2_share_group=e.l2_share_group,
        secrets=model.endpoint_secrets(env, e),
    )


def serving_endpoint(
    scope: Construct,
    id: str,
    env: Environment,
    name: str,
    *,
    eks: EksCluster,
    hyperpod: HyperPodCluster,
    l2: CurvineL2 | None,
    network: HyperPodNetwork,
    secrets_store: SecretsStoreCsi | None,
    after: Sequence[Construct],
) -> ServingEndpoint:
    """The self-managed endpoint ``name`` as a construct: its manifest, ordered after ``l2``'s claim, its S3 and
    secrets access, its NetworkPolicies, its node traffic and its engines checked against and tolerating their
    HyperPod group."""
    from kvtiers.constructs.serving import ServingEndpoint

    e = model._serving(env, name, "self_managed")
    return ServingEndpoint(
        scope,
        id,
        eks_cluster=eks,
        hyperpod=hyperpod,
        name=e.name,
        namespace=env.serving.namespace,
        engine=model.engine(env, e),
        router=model.router(env, e),
        hash_seed=env.serving.hash_seed,
        l2=l2,
        l2_share_group=e.l2_share_group,
        secrets=model.endpoint_secrets(env, e),
        secrets_store=secrets_store,
        network=network,
        after=after,
    )


# ------------------------------------------------------------------------------------------------- operator


# ------------------------------------------------------------------------------------------------- observability


def scraper_rbac_chart(scope: Construct, id: str, env: Environment, *, user: str) -> ScraperRbacChart:
    """Pod discovery for the managed metrics collector in the namespaces it scrapes."""
    from kvtiers.k8s_charts.scraper_rbac import ScraperRbacChart

    return ScraperRbacChart(scope, id, user=user, namespaces=(env.serving.namespace, env.curvine.namespace))
