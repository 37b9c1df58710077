"""Run the verify checks in order with a progress display, and print the summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvtiers.cli import output
from kvtiers.cli.verify import api_key, aws, crosspod, k8s, kvaware, leftovers, placement, tiers
from kvtiers.cli.verify.result import CheckResult, failed
from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment


class SetupError(Exception):
    """AWS or kubeconfig credentials could not be loaded."""


@dataclass
class Clients:
    sagemaker: Any
    kube: Any
    """A ``kubernetes.client.ApiClient``."""
    sagemaker_runtime: Any = None
    """``sagemaker-runtime``: invokes operator endpoints the way clients do. ``None``: that check fails saying so."""
    secretsmanager: Any = None
    """Reads authenticated endpoints' API keys. ``None``: the API-key check fails saying so."""


def real_clients(env: Environment, kube_context: str | None = None, profile: str | None = None) -> Clients:
    import boto3
    from botocore.exceptions import BotoCoreError
    from kubernetes import client, config

    try:
        sagemaker = boto3.Session(profile_name=profile, region_name=env.region).client("sagemaker")
    except BotoCoreError as exc:
        raise SetupError(f"AWS: {exc}") from None
    configuration = client.Configuration()
    try:
        config.load_kube_config(context=kube_context, client_configuration=configuration)
    except (config.ConfigException, FileNotFoundError, OSError) as exc:
        raise SetupError(
            f"kubeconfig: {exc} (run: aws eks update-kubeconfig --name {env.eks.cluster_name} --region {env.region})"
        ) from None
    session = boto3.Session(profile_name=profile, region_name=env.region)
    return Clients(
        sagemaker=sagemaker,
        kube=client.ApiClient(configuration),
        sagemaker_runtime=session.client("sagemaker-runtime"),
        secretsmanager=session.client("secretsmanager"),
    )


def _guard(area: str, name: str, fn: Callable[[], list[CheckResult] | CheckResult]) -> list[CheckResult]:
    """Run one check; an API error becomes a failed check instead of a traceback."""
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - every API failure is reported as a failed check
        status = getattr(exc, "status", None)
        reason = getattr(exc, "reason", None) or exc
        detail = f"HTTP {status}: {reason}" if status else f"{type(exc).__name__}: {reason}"
        if status == 404:
            detail += " (not found)"
        if area == "hyperpod":
            hint = "AWS credentials and region; sagemaker:DescribeCluster and sagemaker:ListClusterNodes permissions"
        else:
            hint = "kubeconfig context and RBAC (get/list on the object); is the workloads stack deployed?"
        return [failed(area, name, detail, hint)]
    return result if isinstance(result, list) else [result]


def steps(env: Environment, clients: Clients, cross_pod: bool, metrics_timeout: float, poll: float):
    from kubernetes.client import AppsV1Api, CoreV1Api

    core, apps, api = CoreV1Api(clients.kube), AppsV1Api(clients.kube), clients.kube
    yield "hyperpod", "HyperPod cluster", lambda: aws.check_hyperpod(clients.sagemaker, env.hyperpod)
    yield "kubernetes", "HyperPod nodes joined", lambda: k8s.check_gpu_nodes(core, env)
    yield "curvine", "Curvine masters", lambda: k8s.check_curvine_masters(core, apps, api, env)
    yield "curvine", "Curvine pods per node", lambda: k8s.check_curvine_nodes(core, apps, env)
    yield "storage", "L2 claim Bound", lambda: k8s.check_l2_claim(core, env)
    yield "storage", k8s.L2_ISOLATION_NAME, lambda: k8s.check_l2_isolation(core, env)
    for endpoint in env.serving.endpoints:
        area = f"endpoint:{endpoint.name}"
        yield area, "engine pods Ready", lambda e=endpoint: k8s.check_engines(core, env, e)
        if endpoint.serving == "operator":
            # The operator runs its own router; what kvtiers adds is the L2, attached by the admission policy.
            yield area, "operator endpoint", lambda e=endpoint: k8s.check_operator_endpoint(api, env, e)
            # The client path: the endpoint's SageMaker endpoint, through the ALB and the operator's router.
            yield (
                area,
                aws.INVOKE_NAME,
                lambda e=endpoint: aws.check_operator_invocation(clients.sagemaker_runtime, env, e),
            )
            if _curvine_l2(env, endpoint):
                yield area, k8s.POLICY_READY_NAME, lambda e=endpoint: k8s.check_operator_policy_ready(api, env, e)
                yield area, "Curvine L2 attached", lambda e=endpoint: k8s.check_operator_l2(core, env, e)
            # A rename's cleanup can fail silently: the old endpoint would keep its GPUs and old settings.
            yield (
                area,
                leftovers.NAME,
                lambda e=endpoint: leftovers.check_operator_leftovers(api, clients.sagemaker, env, e),
            )
            continue
        yield area, "router", lambda e=endpoint: k8s.check_router(core, apps, api, env, e)
        if endpoint.authenticated:
            yield area, api_key.NAME, lambda e=endpoint: api_key.check_api_key(clients.secretsmanager, api, env, e)
        if endpoint.routing == "kvaware":
            yield area, kvaware.NAME, lambda e=endpoint: kvaware.check_kvaware_registration(core, api, env, e)
    if cross_pod:
        started: dict[str, float] = {}

        def cross(e) -> CheckResult:
            started[e.name] = time.time()
            return crosspod.check_cross_pod(core, api, env, e, metrics_timeout, poll, clients.secretsmanager)

        for endpoint, sized in model.sized_endpoints(env):
            if sized.l2_enabled:
                area = f"cross-pod:{endpoint.name}"
                yield area, crosspod.NAME, lambda e=endpoint: cross(e)
                # Which worker holds the blocks the cross-pod check just wrote (node-local placement).
                yield (
                    area,
                    placement.NAME,
                    lambda e=endpoint: placement.check_l2_placement(core, apps, api, env, e, started[e.name]),
                )
    if env.observability.enabled:
        # After the cross-pod check, so that every tier has counted something.
        for endpoint in env.serving.endpoints:
            yield f"tiers:{endpoint.name}", tiers.NAME, lambda e=endpoint: tiers.check_tier_counters(core, api, env, e)


def _curvine_l2(env: Environment, endpoint: Endpoint) -> bool:
    from kvtiers.config.model import operator_endpoint

    return operator_endpoint(env, endpoint.name).curvine_l2


def run(
    env: Environment,
    clients: Clients,
    cross_pod: bool = True,
    metrics_timeout: float = 60.0,
    poll: float = 2.0,
    show_progress: bool = True,
) -> list[CheckResult]:
    plan = list(steps(env, clients, cross_pod, metrics_timeout, poll))
    results: list[CheckResult] = []
    with output.progress(disable=not show_progress) as (advance, total):
        total(len(plan))
        for area, name, fn in plan:
            advance(f"{area}: {name}")
            results.extend(_guard(area, name, fn))
    return results


def report(results: list[CheckResult], as_json: bool = False) -> bool:
    ok = bool(results) and all(r.ok for r in results)
    if as_json:
        output.print_json({"ok": ok, "checks": [r.as_dict() for r in results]})
        return ok
    from rich.markup import escape

    rows = [
        [escape(r.area), escape(r.name), "[green]ok[/green]" if r.ok else "[red]FAIL[/red]", escape(r.detail)]
        for r in results
    ]
    output.console.print(output.table("kvtiers verify", ["area", "check", "", "detail"], rows))
    bad = [r for r in results if not r.ok]
    if bad:
        output.console.print(f"[red]{len(bad)} check(s) failed:[/red]")
        for r in bad:
            output.console.print(f"  - {r.area} / {r.name}: {r.detail}", highlight=False, markup=False)
            output.console.print(f"    look at: {r.hint}", highlight=False, markup=False)
    else:
        output.console.print(f"[green]all {len(results)} checks passed[/green]")
    return ok
