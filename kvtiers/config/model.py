"""The environment's model: the construct props its file maps onto, computed once here and read by the stacks'
wiring (which builds the constructs from them), ``kvtiers plan``, ``verify`` and ``diff``, and the observability
rules. Every derived value (pod sizing, the L2 namespace and mount) is the props' own (:class:`Engine` computes
them), never recomputed from the file.

The chart packages are imported inside the functions that need them: ``kvtiers verify`` reads only names and would
otherwise start cdk8s's JavaScript runtime.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kvtiers.catalog.serving_defaults import GIB
from kvtiers.config.schema import Endpoint, Environment, S3ModelSource
from kvtiers.config.sizing import GB, EndpointSizing, EnvironmentSizing
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.l2 import L2Mount, L2Namespace, L2Volume, l2_owner
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.vllm import HuggingFaceWeights, S3Weights, Weights

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kvtiers.k8s_charts.curvine_l2 import CurvinePorts, CurvineSettings
    from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpoint
    from kvtiers.k8s_charts.serving import Engine, Router


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


def l2_volume(env: Environment) -> L2Volume:
    return L2Volume(claim_name=env.serving.l2_claim_name, mount_path=env.serving.l2_mount_path)


def l2_namespace(env: Environment, e: Endpoint) -> L2Namespace:
    """The endpoint's L2 namespace, as its engine computes it (one computation for both serving paths, ``plan``,
    ``verify`` and the change record)."""
    return engine(env, e).l2_namespace(env.serving.hash_seed)


def l2_mount(env: Environment, e: Endpoint) -> L2Mount:
    """The endpoint's own L2 directory, or its share group's (``l2_share_group``), as its pods mount it."""
    return l2_volume(env).mount(l2_namespace(env, e), owner=l2_owner(endpoint=e.name, share_group=e.l2_share_group))


def l2_remote_url(env: Environment, e: Endpoint) -> str:
    """LMCache's ``remote_url`` for the endpoint's L2 directory (whether or not its L2 is on)."""
    return l2_mount(env, e).remote_url


def l2_report(env: Environment) -> tuple[str, ...]:
    """Synth-time L2 decisions, one line per endpoint, from the environment's sizing (nothing recomputed)."""
    return tuple(f"{s.name}: L2 {'on' if s.l2_enabled else 'off'} ({s.l2_reason})" for s in sizing(env).endpoints)


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


def allowed_clients(env: Environment, e: Endpoint) -> tuple[str, ...]:
    """Who may call the endpoint's router: the environment file's ``allowed_clients``, else internal (the VPC)."""
    return e.allowed_clients or (env.network.cidr,)


def engine(env: Environment, e: Endpoint, *, model_role_arn: str | None = None) -> Engine:
    """The endpoint's engine, whose own figures (:attr:`Engine.sizing`, :attr:`Engine.l0_tokens`) the environment's
    sizing reads. The group's taints are not here: the construct that places the engine on its HyperPod group adds
    their tolerations. An operator endpoint's engine has only the
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
    return sizing(env).endpoint(e.name).l2_enabled and env.inference_operator.l2_backend == "curvine"


def operator_pod_selector(env: Environment, name: str) -> str:
    """``kubectl -l`` selector of an operator endpoint's pods."""
    return names.label_selector(operator_endpoint(env, name).pod_labels)


def curvine_ports(env: Environment) -> CurvinePorts:
    from kvtiers.k8s_charts.curvine_l2 import CurvinePorts

    return CurvinePorts(**env.curvine.ports.model_dump())


def curvine_settings(env: Environment) -> CurvineSettings:
    from kvtiers.k8s_charts.curvine_l2 import (
        CurvineEviction,
        CurvineImages,
        CurvineResources,
        CurvineSettings,
        Resources,
    )

    c = env.curvine
    return CurvineSettings(
        namespace=c.namespace,
        cluster_id=c.cluster_id,
        meta_volume_gib=c.master.meta_volume_gib,
        journal_volume_gib=c.master.journal_volume_gib,
        audit_log=c.master.audit_log,
        nvme_mount=c.worker.nvme_mount,
        data_dir=c.worker.data_dir,
        capacity_gb=c.worker.capacity_gb,
        reserved_gb=c.worker.reserved_gb,
        block_size=c.block_size,
        fs_path=c.fs_path,
        eviction=CurvineEviction(
            high_watermark=c.eviction.high_watermark, low_watermark=c.eviction.low_watermark, policy=c.eviction.policy
        ),
        ports=curvine_ports(env),
        images=CurvineImages(**c.images.model_dump()),
        resources=CurvineResources(
            **{name: Resources(cpu=size.cpu, memory_gib=size.memory_gib) for name, size in c.resources}
        ),
    )


# ------------------------------------------------------------------------------------------------- sizing


def sizing(env: Environment) -> EnvironmentSizing:
    """Every endpoint's cache capacity per tier, pod memory and L2 decision, and the L2's capacity: read off the
    engines' own figures (:class:`Engine` sizes its pods and its GPU cache), computed once per environment."""
    # Keyed by the environment's identity: pydantic's model_copy shares the private dict with a copy whose fields
    # (and so sizing) may differ.
    cached = env.derived.get("sizing")
    if isinstance(cached, tuple) and cached[0] == id(env) and isinstance(cached[1], EnvironmentSizing):
        return cached[1]
    sized = tuple(_endpoint_sizing(env, e) for e in env.serving.endpoints)
    workers = sum(g.count for g in env.curvine_worker_groups)
    capacity = int(workers * env.curvine.worker.capacity_gb * GB * env.curvine.eviction.high_watermark)
    result = EnvironmentSizing(endpoints=sized, l2_capacity_bytes=capacity, curvine_workers=workers)
    env.derived["sizing"] = (id(env), result)
    return result


def sized_endpoints(env: Environment) -> Iterator[tuple[Endpoint, EndpointSizing]]:
    """Each endpoint with its sizing, paired by name (never by list position)."""
    found = sizing(env)
    return ((e, found.endpoint(e.name)) for e in env.serving.endpoints)


def _endpoint_sizing(env: Environment, e: Endpoint) -> EndpointSizing:
    engine_ = engine(env, e)
    kv = engine_.shape.kv_bytes_per_token(engine_.dtype)
    pod = engine_.sizing
    l1_bytes = engine_.l1_gib * engine_.gpus * GIB
    l2_enabled, reason = e.l2_decision(env.serving.l2_threshold_tokens)
    return EndpointSizing(
        name=e.name,
        model=e.model,
        kv_bytes_per_token=kv,
        weight_bytes=engine_.shape.weight_bytes(engine_.dtype),
        gpus_per_replica=engine_.gpus,
        l0_tokens=engine_.l0_tokens,
        l1_bytes=l1_bytes,
        l1_tokens=l1_bytes // kv,
        l2_enabled=l2_enabled,
        l2_reason=reason,
        pod_memory_gib=pod.memory_gib,
        vllm_host_gib=pod.vllm_host_gib,
        model_disk_gib=pod.model_disk_gib,
    )
