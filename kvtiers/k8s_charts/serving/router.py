"""The production-stack router of one endpoint: RBAC for pod discovery, Deployment, ClusterIP (+ internal NLB), PDB."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import cast

import cdk8s
import cdk8s_plus_33 as kplus
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers import checks
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.scheduling import off_hyperpod
from kvtiers.k8s_charts.secrets import (
    API_AUTH_MODULE,
    API_KEY_FILE,
    API_KEY_FILE_ENV,
    HF_TOKEN_PATH,
    SECRETS_DIR,
    EndpointSecrets,
    secrets_mount,
    secrets_volume,
)
from kvtiers.k8s_charts.security import container_security_context, pod_security_context, quantity
from kvtiers.k8s_charts.serving.drain import DRAIN_MAX_SECONDS, node_loss_tolerations
from kvtiers.k8s_charts.serving.extras import with_extra_args, with_extra_env
from kvtiers.k8s_charts.serving.lmcache import config_checksum
from kvtiers.k8s_charts.serving.props import Router
from kvtiers.k8s_charts.shipped import module_source
from kvtiers.k8s_charts.vllm import LMCacheController, S3Weights

READINESS_TIMEOUT_SECONDS = 5
READINESS_FAILURES = 6
"""Readiness: /health answers from the router's event loop, which a burst of requests (and kvaware's tokenizer)
can delay past the 1 s default; a router is taken out of its Service only after 30 s of failures, not one slow
answer."""
ROUTER_RESOURCES = {"cpu": "1", "memory": "2Gi"}
"""Requests = limits; kvaware loads the model's tokenizer in the router, hence more than the chart's 1000Mi."""
DISCOVERY_VERBS = ["get", "list", "watch"]
"""K8sPodIPServiceDiscovery lists/watches pods and reads one pod; it patches pods only for /sleep and /wake_up."""
ROUTER_HOME = "/home/router"
"""HOME and Hugging Face cache of the router (non-root: the image, python:3.12-slim with a venv in /opt/venv, defines
no user and needs none); kvaware downloads the model's tokenizer there."""
ROUTER_WRITABLE = {"home": (ROUTER_HOME, "2Gi"), "tmp": ("/tmp", "1Gi")}
KVAWARE_FALLBACK_MODULE = "kvtiers_kvaware_fallback"
"""kvaware: the module the router loads with ``--callbacks`` (``kvtiers/k8s_charts/kvtiers_kvaware_fallback.py``): a
cache match on an engine that is no longer an endpoint is routed as a miss, never to the departed pod."""
PREVIOUS_API_AUTH_MODULE = "kvtiers_router_auth"
"""With an API key, also shipped for one release: the name the previous release's routers load, now a shim that
serves ``kvtiers_api_auth``'s ``callbacks``, so that such a router restarting after a deploy replaced the ConfigMap
still starts (``kvtiers/k8s_charts/kvtiers_router_auth.py``)."""
ROUTER_SCRIPTS_DIR = "/etc/kvtiers"
SCRIPTS_CHECKSUM_ANNOTATION = "kvtiers.io/router-scripts-sha256"
PRESTOP_DELAY_SECONDS = 10
"""A stopping router keeps serving this long before it gets SIGTERM: kube-proxy on every node drops the pod from the
Service first, so no new request reaches a router that is going away."""
NLB_HEALTH_CHECK_INTERVAL_SECONDS = 10
NLB_HEALTH_CHECK_THRESHOLD = 2
"""The internal NLB's health check of a router's node (HTTP on the Service's healthCheckNodePort, which kube-proxy
answers 200 only while the node runs a Ready router): every 10 s, 2 results to change state. These are the in-tree
provider's defaults for ``externalTrafficPolicy: Local`` (cloud-provider-aws v1.34.3 ``pkg/providers/v1/aws.go``
``buildNLBHealthCheckConfiguration``); kvtiers writes them as annotations so the delays below are derived from the
values in force."""
NLB_MARGIN_SECONDS = 10
"""Beyond the health checks: the NLB applying a target's new state, and one check's timeout."""
NLB_PRESTOP_DELAY_SECONDS = NLB_HEALTH_CHECK_THRESHOLD * NLB_HEALTH_CHECK_INTERVAL_SECONDS + NLB_MARGIN_SECONDS
"""A router behind the NLB keeps serving until the NLB has marked its node unhealthy (it keeps sending new
connections there until then; after the router exits, kube-proxy drops them: kubernetes/kubernetes#50977)."""
NLB_MIN_READY_SECONDS = NLB_HEALTH_CHECK_THRESHOLD * NLB_HEALTH_CHECK_INTERVAL_SECONDS + NLB_MARGIN_SECONDS
"""A new router behind the NLB counts as available (so that a rollout stops an old one) only once the NLB can have
marked its node healthy."""


def prestop_delay_seconds(router: Router) -> int:
    return NLB_PRESTOP_DELAY_SECONDS if router.internal_load_balancer else PRESTOP_DELAY_SECONDS


def termination_grace_seconds(router: Router) -> int:
    """The delay, then as long for the requests in flight as an engine's drain waits for them."""
    return prestop_delay_seconds(router) + DRAIN_MAX_SECONDS


STARTUP_PROBE_PERIOD_SECONDS = 1
STARTUP_SECONDS = 300
"""The router starts in seconds; probing every second lets a replacement take traffic as soon as it can."""
NLB_ANNOTATIONS = {
    # In-tree AWS cloud provider (EKS): an internal Network Load Balancer.
    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
    # AWS Load Balancer Controller, when installed, reads the scheme annotation instead.
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": str(NLB_HEALTH_CHECK_INTERVAL_SECONDS),
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold": str(NLB_HEALTH_CHECK_THRESHOLD),
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold": str(NLB_HEALTH_CHECK_THRESHOLD),
}


ROUTER_HF_HOME = f"{ROUTER_HOME}/.cache/huggingface"
TOKENIZER_MODEL_ENV = "KVTIERS_TOKENIZER_MODEL"
"""With a tokenizer copy: the served model name, whose tokenizer the kvaware fallback module loads when the router
starts (``kvtiers_kvaware_fallback.check_tokenizer``)."""
TOKENIZER_FILES = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "config.json",
    "generation_config.json",
    "chat_template*",
)
"""What the router copies of the S3 weights: the tokenizer and the configs ``AutoTokenizer`` reads (transformers
4.57.6), never the weights."""
TOKENIZER_SYNC_RESOURCES = {"cpu": "250m", "memory": "512Mi"}


def hub_cache_repo_dir(model: str) -> str:
    """The router's Hugging Face cache directory of ``model`` (huggingface_hub's layout)."""
    return f"{ROUTER_HF_HOME}/hub/models--{model.replace('/', '--')}"


HUB_TOKENIZER_SCRIPT = (
    "import pathlib, sys\n"
    "from huggingface_hub import snapshot_download\n"
    "model, revision, repo_dir, *patterns = sys.argv[1:]\n"
    "snapshot = pathlib.Path(snapshot_download(model, revision=revision, allow_patterns=patterns))\n"
    "ref = pathlib.Path(repo_dir, 'refs', 'main')\n"
    "ref.parent.mkdir(parents=True, exist_ok=True)\n"
    "ref.write_text(snapshot.name)\n"
)
"""The pinned revision's tokenizer files into the cache, then ``refs/main`` pointed at the snapshot they are in (the
commit the revision resolved to): the router's ``from_pretrained(<model>)`` asks for ``main``, which offline then
resolves to the engines' revision."""


def check_served_name(owner: object, model: str) -> None:
    """The router looks its tokenizer up by the served model name, which huggingface_hub must accept as a repository
    id."""
    problem = checks.hub_repo_id_problem(model)
    if problem is not None:
        raise checks.invalid(owner, "model", f"{model!r} {problem}: huggingface_hub refuses it as a repository id")


@dataclass(frozen=True, kw_only=True)
class HubTokenizerCopy:
    """kvaware with Hugging Face weights pinned at a revision: the router's tokenizer is that revision's, downloaded at
    start (in the router image, with its huggingface_hub) into its cache, whose ``refs/main`` then names the revision;
    the router runs offline. production-stack's ``AutoTokenizer.from_pretrained(<served model name>)``
    (``routing_logic.py``) passes no revision, so without this it would tokenize with the Hub's ``main``."""

    model: str
    revision: str
    image: str
    """The router image (Python and huggingface_hub at the router's pins)."""
    python: str = "/opt/venv/bin/python"
    """The router image's Python (its venv: production-stack ``docker/Dockerfile``)."""

    def __post_init__(self) -> None:
        check_served_name(self, self.model)

    def command(self) -> list[str]:
        return [
            self.python,
            "-c",
            HUB_TOKENIZER_SCRIPT,
            self.model,
            self.revision,
            hub_cache_repo_dir(self.model),
            *TOKENIZER_FILES,
        ]


@dataclass(frozen=True, kw_only=True)
class TokenizerCopy:
    """kvaware with S3 weights: the router's tokenizer is the engines' own, copied from their S3 prefix at start into
    the router's Hugging Face cache under the served model name, so that production-stack's
    ``AutoTokenizer.from_pretrained(<served model name>)`` (``routing_logic.py``) resolves it offline
    (``HF_HUB_OFFLINE=1``) and never from the Hub by name, which could differ from the weights served."""

    model: str
    """The served model name (``org/name``), which the router looks up."""
    weights: S3Weights
    image: str
    """The AWS CLI image (the engines' ``model_sync_image``)."""

    def __post_init__(self) -> None:
        check_served_name(self, self.model)

    @property
    def commit(self) -> str:
        """A stand-in commit for the cache's ``refs/main``: fixed by the weights' location and revision."""
        return hashlib.sha1(f"{self.weights.url}@{self.weights.revision or ''}".encode()).hexdigest()

    @property
    def repo_dir(self) -> str:
        return hub_cache_repo_dir(self.model)

    @property
    def snapshot_dir(self) -> str:
        return f"{self.repo_dir}/snapshots/{self.commit}"

    def command(self) -> list[str]:
        includes = " ".join(f"--include {shlex.quote(pattern)}" for pattern in TOKENIZER_FILES)
        source, snapshot, refs = (
            shlex.quote(p) for p in (self.weights.url, self.snapshot_dir, f"{self.repo_dir}/refs")
        )
        script = (
            f"aws s3 sync {source} {snapshot} --only-show-errors --exclude '*' {includes} && "
            f"mkdir -p {refs} && printf %s {self.commit} > {refs}/main"
        )
        return ["/bin/sh", "-c", script]


def router_modules(*, controller: LMCacheController | None, api_key: bool) -> tuple[str, ...]:
    """The kvtiers modules the router loads, the one ``--callbacks`` names last."""
    return (*([KVAWARE_FALLBACK_MODULE] if controller is not None else []), *([API_AUTH_MODULE] if api_key else []))


def router_args(
    *, name: str, namespace: str, router: Router, controller: LMCacheController | None, api_key: bool = False
) -> list[str]:
    """The router's command line: discover the endpoint's engine pods, route by ``router.routing``."""
    args = [
        "--host",
        "0.0.0.0",
        "--port",
        str(names.ROUTER_PORT),
        "--service-discovery",
        "k8s",
        "--k8s-namespace",
        namespace,
        "--k8s-service-discovery-type",
        "pod-ip",
        "--k8s-port",
        str(names.ENGINE_PORT),
        "--k8s-label-selector",
        names.label_selector(names.engine_selector(name)),
        "--routing-logic",
        router.routing,
    ]
    if router.routing == "session" and router.session_key is not None:
        args += ["--session-key", router.session_key]
    if router.kv_aware_threshold is not None:
        args += ["--kv-aware-threshold", str(router.kv_aware_threshold)]
    if controller is not None:
        args += [
            "--lmcache-controller-port",
            str(names.LMCACHE_CONTROLLER_PULL_PORT),
            "--lmcache-controller-reply-port",
            str(names.LMCACHE_CONTROLLER_REPLY_PORT),
            # Consistent with the engines' heartbeat (the same LMCacheController): a live engine is never dropped.
            "--lmcache-worker-timeout",
            str(controller.worker_timeout_seconds),
        ]
    modules = router_modules(controller=controller, api_key=api_key)
    if modules:
        args += ["--callbacks", f"{modules[-1]}.callbacks"]
    return args


Mounted = tuple[k8s.Volume, k8s.VolumeMount]
"""A volume with the router container's mount of it: the pod's volumes are those its container mounts."""
Exposed = tuple[k8s.ContainerPort, k8s.ServicePort]
"""A port of the router container with the Service's port to it: the Service's ports are those the container opens."""


class RouterDeployment(Construct):
    """The router's RBAC for pod discovery, its Deployment, its ClusterIP Service and, when asked, an internal NLB.
    Built by :class:`~kvtiers.k8s_charts.serving.ServingChart`, which checks that its inputs agree."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        namespace: str,
        router: Router,
        controller: LMCacheController | None,
        hash_seed: str,
        secrets: EndpointSecrets | None = None,
        tokenizer: TokenizerCopy | HubTokenizerCopy | None = None,
    ) -> None:
        super().__init__(scope, id)
        labels = names.router_pod_labels(name)
        self.service_account, self.role, self.role_binding = self._discovery_rbac(name, namespace, labels)
        api_key = secrets is not None and secrets.api_key_secret is not None
        modules = router_modules(controller=controller, api_key=api_key)
        scripts = _router_scripts(modules, api_key=api_key)
        self.scripts = self._scripts_config_map(name, namespace, labels, scripts) if scripts else None
        annotations = {SCRIPTS_CHECKSUM_ANNOTATION: config_checksum(*scripts.values())} if scripts else None
        env = _router_env(
            hash_seed=hash_seed, controller=controller, secrets=secrets, tokenizer=tokenizer, modules=modules
        )
        mounted = _router_volumes(name, secrets=secrets, scripts=bool(scripts))
        exposed = _router_ports(controller)
        container = _router_container(
            name,
            namespace,
            router,
            controller,
            api_key=api_key,
            env=env,
            ports=[port for port, _ in exposed],
            mounts=[mount for _, mount in mounted],
        )
        pod_spec = _pod_spec(
            name,
            router,
            labels,
            init_containers=_tokenizer_sync(tokenizer, secrets),
            container=container,
            volumes=[volume for volume, _ in mounted],
        )
        self.deployment = self._deployment(name, namespace, labels, router, annotations, pod_spec)
        service_ports = [service_port for _, service_port in exposed]
        self.service = self._service(name, namespace, labels, service_ports)
        self.pdb = self._pdb(name, namespace, labels)
        self.load_balancer = (
            self._internal_load_balancer(name, namespace, labels, router, service_ports[:1])
            if router.internal_load_balancer
            else None
        )

    def _discovery_rbac(
        self, name: str, namespace: str, labels: dict[str, str]
    ) -> tuple[k8s.KubeServiceAccount, kplus.Role, k8s.KubeRoleBinding]:
        account_name = names.router_name(name)
        # Not cdk8s-plus's ServiceAccount: it would set automountServiceAccountToken false on the account, which
        # the pod overrides anyway (discovery needs the token), and change the rendered object.
        account = k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=k8s.ObjectMeta(name=account_name, namespace=namespace, labels=labels),
        )
        role_name = names.router_discovery_role_name(name)
        role = kplus.Role(
            self, "Role", metadata=cdk8s.ApiObjectMetadata(name=role_name, namespace=namespace, labels=labels)
        )
        # jsii declares the interfaces a class implements by decorator, which type checkers do not read.
        role.allow(DISCOVERY_VERBS, cast(kplus.IApiResource, kplus.ApiResource.PODS))
        # Not cdk8s-plus's RoleBinding: it writes apiGroup "" into the ServiceAccount subject.
        binding = k8s.KubeRoleBinding(
            self,
            "RoleBinding",
            metadata=k8s.ObjectMeta(name=role_name, namespace=namespace, labels=labels),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=role_name),
            subjects=[k8s.Subject(kind="ServiceAccount", name=account_name, namespace=namespace)],
        )
        return account, role, binding

    def _scripts_config_map(
        self, name: str, namespace: str, labels: dict[str, str], scripts: dict[str, str]
    ) -> k8s.KubeConfigMap:
        return k8s.KubeConfigMap(
            self,
            "Scripts",
            metadata=k8s.ObjectMeta(
                name=names.router_scripts_config_map_name(name), namespace=namespace, labels=labels
            ),
            data=scripts,
        )

    def _deployment(
        self,
        name: str,
        namespace: str,
        labels: dict[str, str],
        router: Router,
        annotations: dict[str, str] | None,
        pod_spec: k8s.PodSpec,
    ) -> k8s.KubeDeployment:
        return k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(name=names.router_name(name), namespace=namespace, labels=labels),
            spec=k8s.DeploymentSpec(
                replicas=router.replica_count,
                min_ready_seconds=NLB_MIN_READY_SECONDS if router.internal_load_balancer else None,
                selector=k8s.LabelSelector(match_labels=labels),
                # A new router is Ready before an old one stops, so a rollout never leaves the endpoint without one.
                # kvaware too, whose single router hosts the LMCache controller: while both run, the engines' open
                # connections stay with the old one, which keeps routing by its index; when it stops they reconnect
                # through the Service to the new one and re-register by heartbeat (its index restarts empty either
                # way, and a match on an engine it does not know is routed as a miss).
                strategy=k8s.DeploymentStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDeployment(
                        max_surge=k8s.IntOrString.from_number(1), max_unavailable=k8s.IntOrString.from_number(0)
                    ),
                ),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels, annotations=annotations), spec=pod_spec
                ),
            ),
        )

    def _service(
        self, name: str, namespace: str, labels: dict[str, str], ports: list[k8s.ServicePort]
    ) -> k8s.KubeService:
        return k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(name=names.router_name(name), namespace=namespace, labels=labels),
            spec=k8s.ServiceSpec(type="ClusterIP", selector=labels, ports=ports),
        )

    def _pdb(self, name: str, namespace: str, labels: dict[str, str]) -> k8s.KubePodDisruptionBudget:
        # Node drains (and other evictions) take one router at a time.
        return k8s.KubePodDisruptionBudget(
            self,
            "Pdb",
            metadata=k8s.ObjectMeta(name=names.router_name(name), namespace=namespace, labels=labels),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1), selector=k8s.LabelSelector(match_labels=labels)
            ),
        )

    def _internal_load_balancer(
        self, name: str, namespace: str, labels: dict[str, str], router: Router, ports: list[k8s.ServicePort]
    ) -> k8s.KubeService:
        return k8s.KubeService(
            self,
            "InternalNlb",
            metadata=k8s.ObjectMeta(
                name=names.router_load_balancer_name(name),
                namespace=namespace,
                labels=labels,
                annotations=NLB_ANNOTATIONS,
            ),
            spec=k8s.ServiceSpec(
                type="LoadBalancer",
                selector=labels,
                ports=ports,
                load_balancer_source_ranges=list(router.client_cidrs),
                # Local: no second hop through kube-proxy's SNAT, so the router's NetworkPolicy sees the
                # client's address (with Cluster it sees the node's); the NLB sends only to nodes with a router,
                # checked on the Service's healthCheckNodePort.
                external_traffic_policy="Local",
            ),
        )


def _router_scripts(modules: tuple[str, ...], *, api_key: bool) -> dict[str, str]:
    """The sources of the modules the router loads, by file name; none without a module."""
    if not modules:
        return {}
    shipped = (*modules, *([PREVIOUS_API_AUTH_MODULE] if api_key else []))
    return {f"{module}.py": module_source(module) for module in shipped}


def _router_env(
    *,
    hash_seed: str,
    controller: LMCacheController | None,
    secrets: EndpointSecrets | None,
    tokenizer: TokenizerCopy | HubTokenizerCopy | None,
    modules: tuple[str, ...],
) -> list[k8s.EnvVar]:
    """The router's own variables, before ``router.extra_env``."""
    hf_token = secrets is not None and secrets.hf_token_secret is not None
    env = [
        k8s.EnvVar(name="PYTHONHASHSEED", value=hash_seed),
        k8s.EnvVar(name="HOME", value=ROUTER_HOME),
        k8s.EnvVar(name="HF_HOME", value=ROUTER_HF_HOME),
    ]
    if tokenizer is not None:
        # The copy is the only tokenizer: no Hub lookup (and no Hub egress or token needed for it). The kvaware
        # fallback module loads it at start, so a copy the router cannot use fails the start, not each request.
        env.append(k8s.EnvVar(name="HF_HUB_OFFLINE", value="1"))
        env.append(k8s.EnvVar(name=TOKENIZER_MODEL_ENV, value=tokenizer.model))
    elif controller is not None and hf_token:
        # kvaware loads the model's tokenizer from the Hub; huggingface_hub reads the token file at each use.
        env.append(k8s.EnvVar(name="HF_TOKEN_PATH", value=HF_TOKEN_PATH))
    if secrets is not None and secrets.api_key_secret is not None:
        env.append(k8s.EnvVar(name=API_KEY_FILE_ENV, value=f"{SECRETS_DIR}/{API_KEY_FILE}"))
        if len(modules) > 1:
            env.append(k8s.EnvVar(name="KVTIERS_ROUTER_MODULES", value=" ".join(modules[:-1])))
    if modules:
        # --callbacks imports the module by name.
        env.append(k8s.EnvVar(name="PYTHONPATH", value=ROUTER_SCRIPTS_DIR))
    return env


def _tokenizer_sync(
    tokenizer: TokenizerCopy | HubTokenizerCopy | None, secrets: EndpointSecrets | None
) -> list[k8s.Container] | None:
    """With a tokenizer copy, the init container that makes it."""
    if tokenizer is None:
        return None
    hf_token = secrets is not None and secrets.hf_token_secret is not None
    sync = {k: quantity(v) for k, v in TOKENIZER_SYNC_RESOURCES.items()}
    return [
        k8s.Container(
            name="tokenizer-sync",
            image=tokenizer.image,
            command=tokenizer.command(),
            env=[
                k8s.EnvVar(name="HOME", value="/tmp"),
                k8s.EnvVar(name="HF_HOME", value=ROUTER_HF_HOME),
                *([k8s.EnvVar(name="HF_TOKEN_PATH", value=HF_TOKEN_PATH)] if hf_token else []),
            ],
            resources=k8s.ResourceRequirements(requests=sync, limits=dict(sync)),
            volume_mounts=[
                k8s.VolumeMount(name="home", mount_path=ROUTER_HOME),
                k8s.VolumeMount(name="tmp", mount_path="/tmp"),
                *([secrets_mount()] if hf_token else []),
            ],
            security_context=container_security_context(),
        )
    ]


def _router_ports(controller: LMCacheController | None) -> list[Exposed]:
    """HTTP, and with kvaware the LMCache controller's ports, which the engines reach through the Service."""
    exposed = [
        (
            k8s.ContainerPort(name="http", container_port=names.ROUTER_PORT),
            k8s.ServicePort(
                name="http",
                port=names.ROUTER_SERVICE_PORT,
                target_port=k8s.IntOrString.from_string("http"),
                protocol="TCP",
            ),
        )
    ]
    if controller is not None:
        exposed += [
            (
                k8s.ContainerPort(name=port_name, container_port=port),
                k8s.ServicePort(
                    name=port_name, port=port, target_port=k8s.IntOrString.from_string(port_name), protocol="TCP"
                ),
            )
            for port_name, port in (
                ("lmc-pull", names.LMCACHE_CONTROLLER_PULL_PORT),
                ("lmc-reply", names.LMCACHE_CONTROLLER_REPLY_PORT),
            )
        ]
    return exposed


def _router_volumes(name: str, *, secrets: EndpointSecrets | None, scripts: bool) -> list[Mounted]:
    """Every volume of the router pod, with the router container's mount of it."""
    mounted: list[Mounted] = [
        (
            k8s.Volume(name=volume, empty_dir=k8s.EmptyDirVolumeSource(size_limit=quantity(limit))),
            k8s.VolumeMount(name=volume, mount_path=path),
        )
        for volume, (path, limit) in ROUTER_WRITABLE.items()
    ]
    if secrets is not None:
        mounted.append((secrets_volume(name), secrets_mount()))
    if scripts:
        mounted.append(
            (
                k8s.Volume(
                    name="kvtiers",
                    config_map=k8s.ConfigMapVolumeSource(name=names.router_scripts_config_map_name(name)),
                ),
                k8s.VolumeMount(name="kvtiers", mount_path=ROUTER_SCRIPTS_DIR, read_only=True),
            )
        )
    return mounted


def _router_container(
    name: str,
    namespace: str,
    router: Router,
    controller: LMCacheController | None,
    *,
    api_key: bool,
    env: list[k8s.EnvVar],
    ports: list[k8s.ContainerPort],
    mounts: list[k8s.VolumeMount],
) -> k8s.Container:
    http = k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http"))
    resources = {k: quantity(v) for k, v in ROUTER_RESOURCES.items()}
    return k8s.Container(
        name="router",
        image=router.image,
        args=with_extra_args(
            "Router",
            router_args(name=name, namespace=namespace, router=router, controller=controller, api_key=api_key),
            router.extra_args,
        ),
        env=with_extra_env("Router", env, router.extra_env),
        ports=ports,
        resources=k8s.ResourceRequirements(requests=resources, limits=dict(resources)),
        startup_probe=k8s.Probe(
            http_get=http,
            period_seconds=STARTUP_PROBE_PERIOD_SECONDS,
            failure_threshold=STARTUP_SECONDS // STARTUP_PROBE_PERIOD_SECONDS,
        ),
        readiness_probe=k8s.Probe(
            http_get=http,
            period_seconds=5,
            timeout_seconds=READINESS_TIMEOUT_SECONDS,
            failure_threshold=READINESS_FAILURES,
        ),
        liveness_probe=k8s.Probe(http_get=http, period_seconds=10, failure_threshold=3, timeout_seconds=5),
        volume_mounts=mounts,
        # Until the Service has dropped the pod (no HTTP server is needed for a sleep action).
        lifecycle=k8s.Lifecycle(
            pre_stop=k8s.LifecycleHandler(sleep=k8s.SleepAction(seconds=prestop_delay_seconds(router)))
        ),
        security_context=container_security_context(),
    )


def _pod_spec(
    name: str,
    router: Router,
    labels: dict[str, str],
    *,
    init_containers: list[k8s.Container] | None,
    container: k8s.Container,
    volumes: list[k8s.Volume],
) -> k8s.PodSpec:
    return k8s.PodSpec(
        service_account_name=names.router_name(name),
        # Pod discovery lists and watches pods through the API.
        automount_service_account_token=True,
        security_context=pod_security_context(),
        volumes=volumes,
        termination_grace_period_seconds=termination_grace_seconds(router),
        tolerations=node_loss_tolerations(),
        # One router per node (per zone where the nodes allow): a node loss takes one replica.
        # Counted per revision, so that a rollout's new pod is not pushed away by the old ones.
        topology_spread_constraints=[
            k8s.TopologySpreadConstraint(
                max_skew=1,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=k8s.LabelSelector(match_labels=labels),
                match_label_keys=["pod-template-hash"],
                node_taints_policy="Honor",
            )
            for topology_key, when in (
                ("kubernetes.io/hostname", "DoNotSchedule"),
                ("topology.kubernetes.io/zone", "ScheduleAnyway"),
            )
        ],
        # Off the HyperPod nodes: required behind the NLB, whose targets are instances of the cluster's account, which
        # HyperPod's nodes are not (with externalTrafficPolicy Local a router on one would get no NLB
        # traffic), and where the cluster has nodes of its own for them; else preferred.
        affinity=k8s.Affinity(node_affinity=off_hyperpod(required=router.off_hyperpod_required)),
        init_containers=init_containers,
        containers=[container],
    )
