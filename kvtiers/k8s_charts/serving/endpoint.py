"""One endpoint's vLLM + LMCache engines: ServiceAccount, LMCache ConfigMap, Deployment, Service and PDB."""

from __future__ import annotations

import math

import cdk8s
import cdk8s_plus_33 as kplus
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.kvtiers_engine_drain import POD_IP_ENV
from kvtiers.k8s_charts.l2 import L2Mount
from kvtiers.k8s_charts.secrets import (
    API_AUTH_MODULE,
    API_KEY_FILE,
    API_KEY_FILE_ENV,
    ENGINE_KEY_CHECK,
    HF_TOKEN_PATH,
    SECRETS_DIR,
    EndpointSecrets,
    secrets_mount,
    secrets_volume,
)
from kvtiers.k8s_charts.security import container_security_context, pod_security_context, quantity
from kvtiers.k8s_charts.serving.drain import (
    DRAIN_SCRIPT,
    TERMINATION_GRACE_SECONDS,
    drain_command,
    drain_source,
    node_loss_tolerations,
)
from kvtiers.k8s_charts.serving.extras import (
    ENGINE_ENV_PREFIXES,
    ENGINE_KV_FLAGS,
    with_extra_args,
    with_extra_env,
)
from kvtiers.k8s_charts.serving.lmcache import POD_NAME_ENV, config_checksum, per_pod_env, render_lmcache_config
from kvtiers.k8s_charts.serving.props import MODELS_DIR, Engine
from kvtiers.k8s_charts.shipped import module_source
from kvtiers.k8s_charts.vllm import (
    L2_GUARD_MODULE,
    HuggingFaceWeights,
    LMCache,
    S3Weights,
    l2_guard_source,
    vllm_args,
)

LMCACHE_CONFIG_DIR = "/etc/lmcache"
LMCACHE_CONFIG_KEY = "lmcache.yaml"
PROMETHEUS_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PROMETHEUS_MULTIPROC_DIR = "/var/run/prometheus-multiproc"
"""prometheus_client's multiprocess directory, shared by every process of an engine pod (a memory-backed emptyDir
of its own, self-managed and operator pods alike)."""
PROMETHEUS_MULTIPROC_SIZE = "64Mi"
"""Its size limit: prometheus_client creates each file at 1 MiB (one per metric kind and process: API server, engine
core, one per GPU worker), and the directory counts against the pod's memory."""
WIPE_AND_SERVE = f'rm -f "${PROMETHEUS_MULTIPROC_ENV}"/*.db && exec "$0" serve "$@"'
"""The engine container's shell: the multiprocess directory (an emptyDir, kept across container restarts) emptied
before vLLM starts, then vLLM with the container's arguments. vLLM 0.12.0 never wipes a directory the user sets
(``v1/metrics/prometheus.py``), and prometheus_client reopens a file of the same PID (PIDs restart in the new
container) and counts on from the dead run's values."""


def start_command(vllm_binary: str) -> list[str]:
    """``vllm serve`` after the metrics wipe; the container's ``args`` follow as ``$@``."""
    return ["/bin/sh", "-c", WIPE_AND_SERVE, vllm_binary]


API_KEY_FLAGS = frozenset({"--api-key"})
"""Refused in ``extra_args``: a key on the command line would replace the endpoint's keys (CLI flags win over the
``--config`` file) and show in ``/proc/<pid>/cmdline``."""
CONFIG_CHECKSUM_ANNOTATION = "kvtiers.io/lmcache-config-sha256"
MODEL_ROLE_ANNOTATION = "kvtiers.io/model-role-arn"
PROBE_PERIOD_SECONDS = 10
SYNC_EXCLUDES = ("original/*",)
"""Not copied from S3: Meta's checkpoints ship ``original/*.pth``, a second full copy of the weights vLLM never reads
(it loads the safetensors), which would double the disk and the start-up time."""
SYNC_RESOURCES = {"cpu": "1", "memory": "2Gi"}
"""The S3 copy container (its memory sits inside the engine's budget: init containers run before the engine)."""


ENGINE_HOME = "/root"
"""HOME of the engine image's user (root: LMCache's ``docker/Dockerfile`` release stage and the vLLM image it builds
on set no ``USER``)."""
ENGINE_WRITABLE = {
    # name: (mount path, size limit, who writes there)
    "tmp": (
        "/tmp",
        "10Gi",
        "torch inductor's default cache (tempfile.gettempdir()/torchinductor_root), NCCL and Python tempfiles",
    ),
    "cache": (
        f"{ENGINE_HOME}/.cache",
        "20Gi",
        (
            "vLLM's VLLM_CACHE_ROOT (~/.cache/vllm: torch.compile cache), "
            "FlashInfer's JIT cache, huggingface_hub's default HF_HOME for tokenizers"
        ),
    ),
    "triton": (f"{ENGINE_HOME}/.triton", "5Gi", "Triton's kernel cache (TRITON_CACHE_DIR default ~/.triton/cache)"),
    "config": (f"{ENGINE_HOME}/.config", "64Mi", "vLLM's VLLM_CONFIG_ROOT (~/.config/vllm)"),
    "nv": (f"{ENGINE_HOME}/.nv", "2Gi", "the CUDA driver's JIT cache (CUDA_CACHE_PATH default ~/.nv/ComputeCache)"),
}
"""Every path the engine writes besides its volumes (/dev/shm, the model directory, the L2 mount), each an emptyDir,
so that the image's root filesystem can be read-only."""
SYNC_HOME = "/tmp"
"""HOME of the S3 copy container (non-root, no passwd entry): the AWS CLI's scratch space."""


Mounted = tuple[k8s.Volume, k8s.VolumeMount]
"""A volume with the engine container's mount of it: the pod's volumes are those its container mounts."""


class EngineDeployment(Construct):
    """vLLM serving ``engine.model`` with LMCache L1 (and the Curvine L2 when ``l2`` is given). Built by
    :class:`~kvtiers.k8s_charts.serving.ServingChart`, which checks that its inputs agree."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        namespace: str,
        engine: Engine,
        lmcache: LMCache,
        hash_seed: str,
        l2: L2Mount | None,
        secrets: EndpointSecrets | None = None,
    ) -> None:
        super().__init__(scope, id)
        labels = names.engine_pod_labels(name)
        self.name = names.engine_name(name)
        router_host = names.router_host(name, namespace)
        self.config_text = render_lmcache_config(lmcache, router_host=router_host, gpu_workers=engine.gpus)
        api_key = secrets is not None and secrets.api_key_secret is not None
        modules = _engine_modules(lmcache, api_key=api_key)
        # The preStop hook in the same ConfigMap as the modules: one checksum, so a new hook, guard or check rolls the
        # engines.
        scripts = {DRAIN_SCRIPT: drain_source(), **modules}
        self.config_checksum = config_checksum(self.config_text, *(scripts[key] for key in sorted(scripts)))
        self.service_account = self._service_account(name, namespace, labels, engine)
        self.config_map = self._config_map(name, namespace, labels, scripts)
        env = _engine_env(engine, lmcache, hash_seed=hash_seed, secrets=secrets, modules=bool(modules), api_key=api_key)
        mounted = _engine_volumes(name, engine, secrets=secrets, l2=l2)
        init_containers = _model_sync(engine)
        container = _engine_container(
            engine, lmcache, env=env, mounts=[mount for _, mount in mounted], router_host=router_host, api_key=api_key
        )
        pod_spec = _pod_spec(
            name,
            engine,
            labels,
            init_containers=init_containers,
            container=container,
            volumes=[volume for volume, _ in mounted],
        )
        self.deployment = self._deployment(namespace, labels, engine, pod_spec)
        self.service = self._service(namespace, labels)
        self.pdb = self._pdb(namespace, labels)

    def _service_account(
        self, name: str, namespace: str, labels: dict[str, str], engine: Engine
    ) -> kplus.ServiceAccount:
        annotations = {MODEL_ROLE_ANNOTATION: engine.model_role_arn} if engine.model_role_arn else None
        return kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(
                name=names.engine_service_account_name(name),
                namespace=namespace,
                labels=labels,
                annotations=annotations,
            ),
            automount_token=False,
        )

    def _config_map(
        self, name: str, namespace: str, labels: dict[str, str], scripts: dict[str, str]
    ) -> k8s.KubeConfigMap:
        return k8s.KubeConfigMap(
            self,
            "LMCacheConfig",
            metadata=k8s.ObjectMeta(name=names.lmcache_config_map_name(name), namespace=namespace, labels=labels),
            data={LMCACHE_CONFIG_KEY: self.config_text, **scripts},
        )

    def _deployment(
        self, namespace: str, labels: dict[str, str], engine: Engine, pod_spec: k8s.PodSpec
    ) -> k8s.KubeDeployment:
        return k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(name=self.name, namespace=namespace, labels=labels),
            spec=k8s.DeploymentSpec(
                replicas=engine.replicas,
                selector=k8s.LabelSelector(match_labels=labels),
                # GPU-bound: replace one pod at a time, never surge (a surge pod waits for a GPU that is not free).
                strategy=k8s.DeploymentStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDeployment(
                        max_surge=k8s.IntOrString.from_number(0), max_unavailable=k8s.IntOrString.from_number(1)
                    ),
                ),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=labels, annotations={CONFIG_CHECKSUM_ANNOTATION: self.config_checksum}
                    ),
                    spec=pod_spec,
                ),
            ),
        )

    def _service(self, namespace: str, labels: dict[str, str]) -> k8s.KubeService:
        return k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(name=self.name, namespace=namespace, labels=labels),
            spec=k8s.ServiceSpec(
                type="ClusterIP",
                selector=labels,
                ports=[
                    k8s.ServicePort(
                        name="http",
                        port=names.ENGINE_PORT,
                        target_port=k8s.IntOrString.from_string("http"),
                        protocol="TCP",
                    )
                ],
            ),
        )

    def _pdb(self, namespace: str, labels: dict[str, str]) -> k8s.KubePodDisruptionBudget:
        return k8s.KubePodDisruptionBudget(
            self,
            "Pdb",
            metadata=k8s.ObjectMeta(name=self.name, namespace=namespace, labels=labels),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1), selector=k8s.LabelSelector(match_labels=labels)
            ),
        )


def _engine_modules(lmcache: LMCache, *, api_key: bool) -> dict[str, str]:
    """The Python modules vLLM loads from the ConfigMap: with an L2 the L2 guard it loads LMCache through, with an API
    key the key check it loads as middleware."""
    return {
        **({f"{L2_GUARD_MODULE}.py": l2_guard_source()} if lmcache.remote_url is not None else {}),
        **({f"{API_AUTH_MODULE}.py": module_source(API_AUTH_MODULE)} if api_key else {}),
    }


def _engine_env(
    engine: Engine,
    lmcache: LMCache,
    *,
    hash_seed: str,
    secrets: EndpointSecrets | None,
    modules: bool,
    api_key: bool,
) -> list[k8s.EnvVar]:
    """The engine's own variables, before ``engine.extra_env``."""
    env = [
        k8s.EnvVar(name="PYTHONHASHSEED", value=hash_seed),
        k8s.EnvVar(name="LMCACHE_CONFIG_FILE", value=f"{LMCACHE_CONFIG_DIR}/{LMCACHE_CONFIG_KEY}"),
        # vLLM would report usage to stats.vllm.ai (and write ~/.config/vllm), LMCache to stats.lmcache.ai:8080
        # (lmcache/usage_context.py, unless LMCACHE_TRACK_USAGE is "false"): egress the policies deny anyway.
        k8s.EnvVar(name="VLLM_NO_USAGE_STATS", value="1"),
        k8s.EnvVar(name="LMCACHE_TRACK_USAGE", value="false"),
        # One prometheus_client multiprocess directory for the API server, engine core and workers: without it
        # vLLM 0.12.0 (one API server) serves only its own process's registry, and LMCache's metrics, written
        # by the workers, never reach /metrics (kvtiers/observability/metrics.py).
        k8s.EnvVar(name=PROMETHEUS_MULTIPROC_ENV, value=PROMETHEUS_MULTIPROC_DIR),
        # Declared before the LMCache overrides that reference it as $(POD_NAME).
        k8s.EnvVar(
            name=POD_NAME_ENV,
            value_from=k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path="metadata.name")),
        ),
    ]
    env += [k8s.EnvVar(name=k, value=v) for k, v in per_pod_env(lmcache).items()]
    if lmcache.controller is not None:
        # What LMCache's worker registered as its address; the preStop hook's deregistration carries it too.
        env.append(
            k8s.EnvVar(
                name=POD_IP_ENV,
                value_from=k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path="status.podIP")),
            )
        )
    if modules:
        # vLLM imports the guard (kv_connector_module_path) and the key check (--middleware) by module name from
        # the mounted ConfigMap.
        env.append(k8s.EnvVar(name="PYTHONPATH", value=LMCACHE_CONFIG_DIR))
    if api_key:
        env.append(k8s.EnvVar(name=API_KEY_FILE_ENV, value=f"{SECRETS_DIR}/{API_KEY_FILE}"))
    if isinstance(engine.weights, HuggingFaceWeights):
        env.append(k8s.EnvVar(name="HF_HOME", value=f"{MODELS_DIR}/hf-cache"))
        if secrets is not None and secrets.hf_token_secret is not None:
            # huggingface_hub reads the file at each use: a rotated token needs no restart for new downloads.
            env.append(k8s.EnvVar(name="HF_TOKEN_PATH", value=HF_TOKEN_PATH))
    return env


def _engine_volumes(name: str, engine: Engine, *, secrets: EndpointSecrets | None, l2: L2Mount | None) -> list[Mounted]:
    """Every volume of the engine pod, with the engine container's mount of it."""
    mounted: list[Mounted] = [
        (
            k8s.Volume(
                name="shm",
                empty_dir=k8s.EmptyDirVolumeSource(medium="Memory", size_limit=quantity(f"{engine.shm_gib}Gi")),
            ),
            k8s.VolumeMount(name="shm", mount_path="/dev/shm"),
        ),
        (
            # Node ephemeral storage, limited so that a download can never fill the node's disk.
            k8s.Volume(
                name="models",
                empty_dir=k8s.EmptyDirVolumeSource(size_limit=quantity(f"{engine.sizing.model_disk_gib}Gi")),
            ),
            k8s.VolumeMount(name="models", mount_path=MODELS_DIR),
        ),
        (
            k8s.Volume(
                name="lmcache-config", config_map=k8s.ConfigMapVolumeSource(name=names.lmcache_config_map_name(name))
            ),
            k8s.VolumeMount(name="lmcache-config", mount_path=LMCACHE_CONFIG_DIR, read_only=True),
        ),
        (
            k8s.Volume(
                name="prometheus",
                empty_dir=k8s.EmptyDirVolumeSource(medium="Memory", size_limit=quantity(PROMETHEUS_MULTIPROC_SIZE)),
            ),
            k8s.VolumeMount(name="prometheus", mount_path=PROMETHEUS_MULTIPROC_DIR),
        ),
    ]
    mounted += [
        (
            k8s.Volume(name=volume, empty_dir=k8s.EmptyDirVolumeSource(size_limit=quantity(limit))),
            k8s.VolumeMount(name=volume, mount_path=path),
        )
        for volume, (path, limit, _why) in ENGINE_WRITABLE.items()
    ]
    if secrets is not None:
        # The endpoint's API keys (the engines check them too) and the Hugging Face token.
        mounted.append((secrets_volume(name), secrets_mount()))
    if l2 is not None:
        mounted.append(
            (
                k8s.Volume(
                    name="l2-cache",
                    persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(claim_name=l2.claim_name),
                ),
                k8s.VolumeMount(name="l2-cache", mount_path=l2.mount_path, sub_path=l2.sub_path),
            )
        )
    return mounted


def _model_sync(engine: Engine) -> list[k8s.Container] | None:
    """With S3 weights, the init container that copies them into the models volume."""
    weights = engine.weights
    if not isinstance(weights, S3Weights):
        return None
    sync_resources = {k: quantity(v) for k, v in SYNC_RESOURCES.items()}
    return [
        k8s.Container(
            name="model-sync",
            image=engine.model_sync_image,
            command=[
                "aws",
                "s3",
                "sync",
                weights.url,
                engine.model_path,
                "--only-show-errors",
                *(arg for pattern in SYNC_EXCLUDES for arg in ("--exclude", pattern)),
            ],
            resources=k8s.ResourceRequirements(requests=sync_resources, limits=dict(sync_resources)),
            env=[k8s.EnvVar(name="HOME", value=SYNC_HOME)],
            volume_mounts=[
                k8s.VolumeMount(name="models", mount_path=MODELS_DIR),
                k8s.VolumeMount(name="tmp", mount_path=SYNC_HOME),
            ],
            # Non-root: the AWS CLI image defines no user, and the copy only writes the model emptyDir
            # (world-writable) and its HOME. The engine, root without capabilities, reads the 0644 files.
            security_context=container_security_context(),
        )
    ]


def _engine_args(engine: Engine, lmcache: LMCache, *, api_key: bool) -> list[str]:
    """vLLM's arguments, then ``engine.extra_args``."""
    weights = engine.weights
    args = vllm_args(
        model_path=engine.model_path,
        lmcache=lmcache,
        served_model_name=engine.model,
        tensor_parallel_size=engine.tensor_parallel_size,
        pipeline_parallel_size=engine.pipeline_parallel_size,
        max_model_len=engine.max_model_len,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        dtype=engine.dtype,
        port=names.ENGINE_PORT,
        revision=weights.revision if isinstance(weights, HuggingFaceWeights) else None,
    )
    refused = [a for a in engine.extra_args if a.split("=", 1)[0].replace("_", "-") in API_KEY_FLAGS]
    if refused:
        raise ValueError(
            f"Engine: extra_args {refused[0]!r}: the endpoint's API keys come from Secrets Manager "
            "(EndpointSecrets.api_key_secret) and the router and the engines check them; vLLM logs a key given "
            "on its command line at start and checks it only under /v1"
        )
    if api_key:
        args += ["--middleware", ENGINE_KEY_CHECK]
    return with_extra_args("Engine", args, engine.extra_args, kv_flags=ENGINE_KV_FLAGS)


def _engine_ports(engine: Engine, lmcache: LMCache) -> list[k8s.ContainerPort]:
    ports = [k8s.ContainerPort(name="http", container_port=names.ENGINE_PORT)]
    if lmcache.controller is not None:
        ports += [
            k8s.ContainerPort(name=f"lmc-worker-{i}", container_port=p)
            for i, p in enumerate(names.lmcache_worker_ports(engine.gpus))
        ]
    return ports


def _engine_container(
    engine: Engine,
    lmcache: LMCache,
    *,
    env: list[k8s.EnvVar],
    mounts: list[k8s.VolumeMount],
    router_host: str,
    api_key: bool,
) -> k8s.Container:
    args = _engine_args(engine, lmcache, api_key=api_key)
    ports = _engine_ports(engine, lmcache)
    http = k8s.HttpGetAction(path="/health", port=k8s.IntOrString.from_string("http"))
    resources = {
        "cpu": quantity(engine.cpu),
        "memory": quantity(f"{engine.sizing.memory_gib}Gi"),
        names.GPU_RESOURCE: quantity(engine.gpus),
    }
    return k8s.Container(
        name="vllm",
        image=engine.image,
        # A command (without --enable-sleep-mode) also tells the router's discovery not to probe sleep mode.
        command=start_command(engine.vllm_binary),
        args=args,
        env=with_extra_env("Engine", env, engine.extra_env, reserved_prefixes=ENGINE_ENV_PREFIXES),
        ports=ports,
        resources=k8s.ResourceRequirements(requests=resources, limits=dict(resources)),
        volume_mounts=mounts,
        startup_probe=k8s.Probe(
            http_get=http,
            period_seconds=PROBE_PERIOD_SECONDS,
            failure_threshold=math.ceil(engine.startup_timeout_seconds / PROBE_PERIOD_SECONDS),
        ),
        readiness_probe=k8s.Probe(http_get=http, period_seconds=5, failure_threshold=3),
        liveness_probe=k8s.Probe(http_get=http, period_seconds=10, failure_threshold=3, timeout_seconds=5),
        lifecycle=_drain_before_stop(engine, lmcache, router_host=router_host),
        # Root: the image defines no other user, and the L2 files on the shared Curvine mount are written by
        # every engine as the same owner. Every capability is dropped, so root cannot bypass file permissions;
        # the root filesystem is read-only, with each written path an explicit volume (ENGINE_WRITABLE).
        security_context=container_security_context(root=True),
    )


def _drain_before_stop(engine: Engine, lmcache: LMCache, *, router_host: str) -> k8s.Lifecycle:
    """Leave the router (and kvaware's controller) and finish the requests in flight before vLLM stops."""
    return k8s.Lifecycle(
        pre_stop=k8s.LifecycleHandler(
            exec=k8s.ExecAction(
                command=drain_command(
                    vllm_binary=engine.vllm_binary,
                    script_dir=LMCACHE_CONFIG_DIR,
                    controller=lmcache.controller,
                    router_host=router_host,
                    gpu_workers=engine.gpus,
                )
            )
        )
    )


def _pod_spec(
    name: str,
    engine: Engine,
    labels: dict[str, str],
    *,
    init_containers: list[k8s.Container] | None,
    container: k8s.Container,
    volumes: list[k8s.Volume],
) -> k8s.PodSpec:
    # The GPU taint last: the instance group's own taints come first, as the group declares them.
    tolerations = [t.to_k8s() for t in engine.tolerations] + [
        k8s.Toleration(key=names.GPU_RESOURCE, operator="Exists", effect="NoSchedule"),
        *node_loss_tolerations(),
    ]
    return k8s.PodSpec(
        service_account_name=names.engine_service_account_name(name),
        automount_service_account_token=False,
        security_context=pod_security_context(root=True),
        node_selector={names.HYPERPOD_INSTANCE_GROUP: engine.instance_group},
        tolerations=tolerations,
        topology_spread_constraints=[
            k8s.TopologySpreadConstraint(
                max_skew=1,
                topology_key="kubernetes.io/hostname",
                when_unsatisfiable="DoNotSchedule",
                label_selector=k8s.LabelSelector(match_labels=labels),
                # Every revision counted (no matchLabelKeys): with maxSurge 0 old and new pods stay
                # within one of each other on every node through a rollout; one revision counted
                # alone could send the next new pod to a node still full of old ones, for good.
                # A node cordoned or tainted for repair is no domain: its zero engines would hold
                # the others at one per node and leave a replaced pod Pending.
                node_taints_policy="Honor",
            )
        ],
        termination_grace_period_seconds=TERMINATION_GRACE_SECONDS,
        init_containers=init_containers,
        containers=[container],
        volumes=volumes,
    )
