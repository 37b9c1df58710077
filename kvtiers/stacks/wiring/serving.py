"""Serving and the operator path: the environment's endpoints as :mod:`kvtiers.k8s_charts` props and charts.

Every derived number (pod memory, the L1 per GPU worker, the L2 decision) is read from the environment's sizing,
computed once by :mod:`kvtiers.config.sizing`; both serving paths, ``kvtiers plan`` and the synth read it from here.

The chart packages are imported inside the functions that need them: ``kvtiers plan`` reads only the L2 names and
would otherwise start cdk8s's JavaScript runtime.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kvtiers.config.schema import Endpoint, Environment, S3ModelSource
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.l2 import L2Mount, L2Namespace, L2Volume, l2_owner
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.vllm import (
    HuggingFaceWeights,
    S3Weights,
    Weights,
)

if TYPE_CHECKING:
    from constructs import Construct

    from kvtiers.constructs.curvine import CurvineL2
    from kvtiers.constructs.eks_cluster import EksCluster
    from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi
    from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
    from kvtiers.constructs.network import HyperPodNetwork
    from kvtiers.constructs.serving import ServingEndpoint
    from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpoint
    from kvtiers.k8s_charts.scraper_rbac import ScraperRbacChart
    from kvtiers.k8s_charts.serving import Engine, Router, ServingChart


def endpoint(env: Environment, name: str) -> Endpoint:
    found = next((e for e in env.serving.endpoints if e.name == name), None)
    if found is None:
        known = ", ".join(e.name for e in env.serving.endpoints) or "none"
        raise ValueError(f"serving.endpoints: no endpoint named {name!r} (known: {known})")
    return found


def _serving(env: Environment, name: str, serving: str) -> Endpoint:
    found = endpoint(env, name)
    if found.serving != serving:
        raise ValueError(f"serving.endpoints {name}: serving is {found.serving!r}, not {serving!r}")
    return found


# ------------------------------------------------------------------------------------------------- the L2


def l2_volume(env: Environment) -> L2Volume:
    return L2Volume(claim_name=env.serving.l2_claim_name, mount_path=env.serving.l2_mount_path)


def l2_namespace(env: Environment, e: Endpoint) -> L2Namespace:
    return env.serving.l2_namespace(e)


def l2_mount(env: Environment, e: Endpoint) -> L2Mount:
    """The endpoint's own L2 directory, or its share group's (``l2_share_group``), as its pods mount it."""
    return l2_volume(env).mount(l2_namespace(env, e), owner=l2_owner(endpoint=e.name, share_group=e.l2_share_group))


def l2_remote_url(env: Environment, e: Endpoint) -> str:
    """LMCache's ``remote_url`` for the endpoint's L2 directory (whether or not its L2 is on)."""
    return l2_mount(env, e).remote_url


def l2_report(env: Environment) -> tuple[str, ...]:
    """Synth-time L2 decisions, one line per endpoint, from the environment's sizing (nothing recomputed)."""
    return tuple(f"{s.name}: L2 {'on' if s.l2_enabled else 'off'} ({s.l2_reason})" for s in env.sizing.endpoints)


# ------------------------------------------------------------------------------------------------- both paths


def weights(e: Endpoint) -> Weights:
    source = e.source
    if isinstance(source, S3ModelSource):
        return S3Weights(bucket=source.bucket, prefix=source.prefix, revision=source.revision)
    return HuggingFaceWeights(revision=source.revision)


def endpoint_secrets(env: Environment, e: Endpoint) -> EndpointSecrets | None:
    """The Secrets Manager secrets the endpoint's pods read: its API keys (``api_key``), its Hugging Face token."""
    api_key = env.api_key_secret_name(e.name) if e.authenticated else None
    if api_key is None and e.hf_token_secret is None:
        return None
    return EndpointSecrets(region=env.region, api_key_secret=api_key, hf_token_secret=e.hf_token_secret)


# ------------------------------------------------------------------------------------------------- self-managed


def allowed_clients(env: Environment, e: Endpoint) -> tuple[str, ...]:
    """Who may call the endpoint's router: the environment file's ``allowed_clients``, else internal (the VPC)."""
    return e.allowed_clients or (env.network.cidr,)


def engine(env: Environment, e: Endpoint, *, model_role_arn: str | None = None) -> Engine:
    """The endpoint's engine; its pod memory and model disk come out the same as the environment's sizing (both
    from :func:`kvtiers.serving_defaults.engine_pod_sizing`). The group's taints are not here: the construct that
    places the engine on its HyperPod group adds their tolerations. An operator endpoint's engine has only the
    fields the operator carries (``OperatorEndpoint.from_engine``)."""
    from kvtiers.k8s_charts.serving import Engine

    images = env.serving.images
    common = Engine(
        model=e.model,
        weights=weights(e),
        image=images.vllm_image,
        lmcache_version=images.engine.lmcache,
        instance_group=e.instance_group,
        replicas=e.replicas,
        tensor_parallel_size=e.tensor_parallel_size,
        pipeline_parallel_size=e.pipeline_parallel_size,
        dtype=e.dtype,
        max_model_len=e.max_model_len,
        gpu_memory_utilization=e.gpu_memory_utilization,
        cpu=e.cpu,
        l1_gib=e.l1_gib,
        shm_gib=e.shm_gib,
        vllm_overhead_gib=e.vllm_overhead_gib,
        model_shape=e.shape,
    )
    if e.serving == "operator":
        return common
    return dataclasses.replace(
        common,
        model_sync_image=images.model_sync_image,
        startup_timeout_seconds=e.startup_timeout_seconds,
        model_role_arn=model_role_arn,
    )


def router(env: Environment, e: Endpoint) -> Router:
    from kvtiers.k8s_charts.serving import Router

    return Router(
        image=env.serving.images.router_image,
        routing=e.routing,
        replicas=e.router_replicas,
        session_key=e.session_key,
        internal_load_balancer=e.internal_load_balancer,
        client_cidrs=allowed_clients(env, e),
        kv_aware_threshold=e.kv_aware_threshold,
    )


def serving_chart(
    scope: Construct, id: str, env: Environment, name: str, *, model_role_arn: str | None = None
) -> ServingChart:
    """The self-managed endpoint ``name``: engines with the L2 when the sizing turned it on, and the router."""
    from kvtiers.constructs.serving import tolerating_taints
    from kvtiers.k8s_charts.serving import ServingChart

    e = _serving(env, name, "self_managed")
    taints = ((t.key, t.value, t.effect) for t in env.hyperpod.group(e.instance_group).taints)
    return ServingChart(
        scope,
        id,
        name=e.name,
        namespace=env.serving.namespace,
        engine=tolerating_taints(engine(env, e, model_role_arn=model_role_arn), taints),
        router=router(env, e),
        hash_seed=env.serving.hash_seed,
        l2=l2_volume(env) if env.sizing.endpoint(name).l2_enabled else None,
        l2_share_group=e.l2_share_group,
        secrets=endpoint_secrets(env, e),
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
) -> ServingEndpoint:
    """The self-managed endpoint ``name`` as a construct: its manifest, ordered after ``l2``'s claim, its S3 and
    secrets access, its NetworkPolicies, its node traffic and its engines checked against and tolerating their
    HyperPod group."""
    from kvtiers.constructs.serving import ServingEndpoint

    e = _serving(env, name, "self_managed")
    return ServingEndpoint(
        scope,
        id,
        eks_cluster=eks,
        hyperpod=hyperpod,
        name=e.name,
        namespace=env.serving.namespace,
        engine=engine(env, e),
        router=router(env, e),
        hash_seed=env.serving.hash_seed,
        l2=l2,
        l2_share_group=e.l2_share_group,
        secrets=endpoint_secrets(env, e),
        secrets_store=secrets_store,
        network=network,
    )


# ------------------------------------------------------------------------------------------------- operator


def operator_endpoint(env: Environment, name: str) -> OperatorEndpoint:
    """The operator endpoint ``name`` as :class:`~kvtiers.constructs.operator_serving.OperatorServingEndpoint`
    computes it from the same choices (for the CLI and the NetworkPolicies, which build no construct)."""
    from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpoint

    e = _serving(env, name, "operator")
    return OperatorEndpoint.from_engine(
        name=e.name,
        namespace=env.serving.namespace,
        engine=engine(env, e),
        instance_type=env.hyperpod.group(e.instance_group).instance_type,
        region=env.region,
        routing=e.routing,
        api=e.api,
        hash_seed=env.serving.hash_seed,
        addon_version=env.inference_operator.addons.inference_operator,
        l2=l2_volume(env) if operator_l2(env, e) else None,
        l2_share_group=e.l2_share_group,
    )


def operator_l2(env: Environment, e: Endpoint) -> bool:
    """An operator endpoint mounts the Curvine L2: when the sizing turns its L2 on, on the Curvine backend."""
    return env.sizing.endpoint(e.name).l2_enabled and env.inference_operator.l2_backend == "curvine"


def operator_pod_selector(env: Environment, name: str) -> str:
    """``kubectl -l`` selector of an operator endpoint's pods."""
    return names.label_selector(operator_endpoint(env, name).pod_labels)


# ------------------------------------------------------------------------------------------------- observability


def scraper_rbac_chart(scope: Construct, id: str, env: Environment, *, user: str) -> ScraperRbacChart:
    """Pod discovery for the managed metrics collector in the namespaces it scrapes."""
    from kvtiers.k8s_charts.scraper_rbac import ScraperRbacChart

    return ScraperRbacChart(scope, id, user=user, namespaces=(env.serving.namespace, env.curvine.namespace))
