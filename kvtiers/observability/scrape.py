"""The managed collector's Prometheus scrape configuration: which pods, on which port, with which labels.

Each target gets ``component`` (engine, router, curvine-master, curvine-worker, l2-janitor) and, for serving pods, ``endpoint``
(the endpoint's name in the environment file). Rules and dashboards select by these two labels only, so the
router's reuse of vLLM's metric names cannot mix into the engines' numbers. Ports come from the charts' constants.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from kvtiers.config.model import curvine_ports, operator_endpoint
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.curvine_l2.props import port_table

ENDPOINT = "endpoint"
COMPONENT = "component"
ENGINE, ROUTER, CURVINE_MASTER, CURVINE_WORKER = "engine", "router", "curvine-master", "curvine-worker"
L2_JANITOR = "l2-janitor"
METRICS_PATH = "/metrics"


@dataclass(frozen=True)
class ScrapeTarget:
    """Pods of one kind and the port their ``/metrics`` is on."""

    job: str
    component: str
    namespace: str
    port: int
    pod_labels: dict[str, str]
    """Pods are kept when every label has this value (regular expression)."""
    endpoint_from: str | None = None
    """Pod label whose value is the endpoint name; ``None``: set by ``endpoints`` instead."""
    endpoints: tuple[tuple[str, str], ...] = ()
    """``(pod label value, endpoint name)`` pairs, for operator pods, whose label is the object name."""


def meta_label(pod_label: str) -> str:
    """Prometheus's discovery label for a pod label (every character outside [a-zA-Z0-9_] becomes ``_``)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in pod_label)


def targets(env: Environment) -> list[ScrapeTarget]:
    ns, cv = env.serving.namespace, env.curvine.namespace
    web = {p.name: p.port for p in port_table(curvine_ports(env))}
    result = [
        ScrapeTarget(
            "curvine-master",
            CURVINE_MASTER,
            cv,
            web["master_web"],
            {names.COMPONENT: "master", names.PART_OF_KEY: names.PART_OF},
        ),
        ScrapeTarget(
            "curvine-worker",
            CURVINE_WORKER,
            cv,
            web["worker_web"],
            {names.COMPONENT: "worker", names.PART_OF_KEY: names.PART_OF},
        ),
        ScrapeTarget(
            "curvine-l2-janitor",
            L2_JANITOR,
            ns,
            names.CURVINE_JANITOR_METRICS_PORT,
            {names.COMPONENT: names.CURVINE_JANITOR_COMPONENT, names.PART_OF_KEY: names.PART_OF},
        ),
    ]
    self_managed = [e for e in env.serving.endpoints if e.serving == "self_managed"]
    operator = [e for e in env.serving.endpoints if e.serving == "operator"]
    if self_managed:
        result += [
            ScrapeTarget(
                "kvtiers-engines",
                ENGINE,
                ns,
                names.ENGINE_PORT,
                {names.COMPONENT: names.ENGINE_COMPONENT},
                names.ENDPOINT,
            ),
            ScrapeTarget(
                "kvtiers-routers",
                ROUTER,
                ns,
                names.ROUTER_PORT,
                {names.COMPONENT: names.ROUTER_COMPONENT},
                names.ENDPOINT,
            ),
        ]
    if operator:
        pairs = tuple((operator_endpoint(env, e.name).object_name, e.name) for e in operator)
        result.append(
            ScrapeTarget(
                "operator-engines",
                ENGINE,
                ns,
                names.OPERATOR_PORT,
                {names.OPERATOR_POD_LABEL: "|".join(name for name, _ in pairs)},
                endpoints=pairs,
            )
        )
    return result


def _job(target: ScrapeTarget) -> dict:
    relabel = [{"source_labels": [meta_label(k)], "regex": v, "action": "keep"} for k, v in target.pod_labels.items()]
    relabel += [
        {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(target.port), "action": "keep"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
        {"target_label": COMPONENT, "replacement": target.component},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]
    if target.endpoint_from:
        relabel.append({"source_labels": [meta_label(target.endpoint_from)], "target_label": ENDPOINT})
    for value, endpoint in target.endpoints:
        relabel.append(
            {
                "source_labels": [meta_label(names.OPERATOR_POD_LABEL)],
                "regex": value,
                "target_label": ENDPOINT,
                "replacement": endpoint,
            }
        )
    return {
        "job_name": target.job,
        "metrics_path": METRICS_PATH,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [target.namespace]}}],
        "relabel_configs": relabel,
    }


def scrape_configuration(env: Environment) -> str:
    """The YAML the managed collector takes (``ScrapeConfiguration.ConfigurationBlob``)."""
    interval = f"{env.observability.scrape_interval_seconds}s"
    config = {
        "global": {"scrape_interval": interval, "external_labels": {"environment": env.name}},
        "scrape_configs": [_job(t) for t in targets(env)],
    }
    return yaml.safe_dump(config, sort_keys=False)
