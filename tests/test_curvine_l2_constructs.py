"""The Curvine L2 charts as a library: each built in a bare cdk8s app from explicit arguments (no environment file),
every rule of :class:`CurvineCluster` and its value objects checked when it is built, with the class and the field
named in the error."""

from __future__ import annotations

import tomllib
import types
from collections.abc import Callable

import cdk8s
import kubernetes_validate
import pytest
import tomli_w
from cdk8s_plus_33 import k8s

from kvtiers.k8s_charts.curvine_l2 import (
    CurvineCluster,
    CurvineCsiChart,
    CurvineEviction,
    CurvineImages,
    CurvineMasterChart,
    CurvinePorts,
    CurvineResources,
    CurvineStorageChart,
    CurvineWorkerChart,
    MasterVolumeIds,
    Resources,
    Toleration,
)
from kvtiers.k8s_charts.curvine_l2 import props as curvine_props
from kvtiers.k8s_charts.curvine_l2.charts import (
    DEFAULT_CLAIM_NAME,
    DEFAULT_CLAIM_SIZE_GIB,
    DEFAULT_JANITOR_INTERVAL_SECONDS,
)

ENGINE_IMAGE = "lmcache/vllm-openai:v0.3.7"


def volumes(n: int) -> tuple[MasterVolumeIds, ...]:
    return tuple(MasterVolumeIds(meta_volume_id=f"vol-m{i}", journal_volume_id=f"vol-j{i}") for i in range(n))


def cluster(**overrides) -> CurvineCluster:
    """The required arguments only, unless overridden."""
    required = {
        "master_volumes": volumes(1),
        "availability_zone": "us-east-1a",
        "hyperpod_groups": ("gpu",),
        "worker_nodes": 2,
    }
    return CurvineCluster(**{**required, **overrides})


def storage(app: cdk8s.App, c: CurvineCluster, **overrides) -> CurvineStorageChart:
    return CurvineStorageChart(
        app, "storage", cluster=c, **{"serving_namespace": "serving", "janitor_image": ENGINE_IMAGE, **overrides}
    )


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj)
    return kinds


# ------------------------------------------------------------------------------------- each chart, bare


def test_master_chart_in_a_bare_app():
    objects = CurvineMasterChart(cdk8s.Testing.app(), "masters", cluster=cluster()).to_json()
    kinds = by_kind(objects)
    assert sorted(kinds) == ["ConfigMap", "Namespace", "PersistentVolume", "Service", "StatefulSet"]
    (statefulset,) = kinds["StatefulSet"]
    assert statefulset["spec"]["replicas"] == 1
    assert {pv["spec"]["csi"]["volumeHandle"] for pv in kinds["PersistentVolume"]} == {"vol-m0", "vol-j0"}
    affinity = statefulset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term["values"] == ["gpu"]  # worker_groups defaults to every HyperPod group
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_worker_chart_in_a_bare_app():
    (daemonset,) = CurvineWorkerChart(cdk8s.Testing.app(), "workers", cluster=cluster()).to_json()
    spec = daemonset["spec"]["template"]["spec"]
    assert daemonset["kind"] == "DaemonSet" and spec["hostNetwork"] is True
    assert next(v for v in spec["volumes"] if v["name"] == "nvme")["hostPath"]["path"] == "/opt/dlami/nvme"
    kubernetes_validate.validate(daemonset, "1.34", strict=True)


def test_csi_chart_in_a_bare_app():
    objects = CurvineCsiChart(cdk8s.Testing.app(), "csi", cluster=cluster()).to_json()
    assert sorted(o["kind"] for o in objects) == [
        "CSIDriver",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "ServiceAccount",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_storage_chart_in_a_bare_app():
    c = cluster()
    objects = storage(cdk8s.Testing.app(), c).to_json()
    kinds = by_kind(objects)
    (claim,) = kinds["PersistentVolumeClaim"]
    assert claim["metadata"] == {"name": DEFAULT_CLAIM_NAME, "namespace": "serving"}
    deployment = next(d for d in kinds["Deployment"] if d["metadata"]["name"] == "curvine-l2-janitor")
    janitor = deployment["spec"]["template"]["spec"]["containers"][0]
    assert janitor["image"] == ENGINE_IMAGE
    args = janitor["args"]
    assert args[args.index("--interval") + 1] == str(DEFAULT_JANITOR_INTERVAL_SECONDS)
    assert args[args.index("--capacity-bytes") + 1] == str(2 * 1000 * 1000**3)  # worker_nodes x capacity_gb
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_charts_take_keyword_arguments_only():
    with pytest.raises(TypeError):
        CurvineMasterChart(cdk8s.Testing.app(), "masters", cluster())  # type: ignore[misc]  # positional on purpose
    with pytest.raises(TypeError):
        CurvineWorkerChart(cdk8s.Testing.app(), "workers", props=cluster())  # type: ignore[call-arg]  # old keyword


def test_a_misspelled_field_is_rejected_when_the_object_is_built():
    """The charts build typed cdk8s objects: a wrong field name fails at synth, not at ``kubectl apply``."""
    with pytest.raises(TypeError, match="replicaz"):
        k8s.StatefulSetSpec(
            selector=k8s.LabelSelector(match_labels={"a": "b"}),
            template=k8s.PodTemplateSpec(),
            replicaz=1,  # type: ignore[call-arg]  # the misspelling under test
        )


def test_tolerations_render_with_the_operator_their_value_implies():
    c = cluster(tolerations=(Toleration(key="dedicated", value="llm"), Toleration(key="maintenance")))
    (daemonset,) = CurvineWorkerChart(cdk8s.Testing.app(), "workers", cluster=c).to_json()
    assert daemonset["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},
    ]


# --------------------------------------------------------------------------- derived once, read by all


def test_every_master_address_comes_from_one_derivation():
    """The masters' own hostname (``$(POD_NAME)`` per pod), the journal peers, the clients' master list and the
    StorageClass's ``master-addrs`` name the same hosts."""
    c = cluster(master_volumes=volumes(3))
    app = cdk8s.Testing.app()
    masters = by_kind(CurvineMasterChart(app, "masters", cluster=c).to_json())
    (storage_class,) = by_kind(storage(app, c).to_json())["StorageClass"]
    (statefulset,) = masters["StatefulSet"]
    (config_map,) = masters["ConfigMap"]
    config = tomllib.loads(config_map["data"]["curvine-cluster.toml"])
    env = {e["name"]: e for e in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]}
    own = [
        env["CURVINE_MASTER_HOSTNAME"]["value"].replace("$(POD_NAME)", f"{statefulset['metadata']['name']}-{i}")
        for i in range(3)
    ]
    assert own == [a["hostname"] for a in config["journal"]["journal_addrs"]]
    assert own == [a["hostname"] for a in config["client"]["master_addrs"]]
    assert storage_class["parameters"]["master-addrs"] == ",".join(f"{h}:{c.ports.master_rpc}" for h in own)


def test_the_config_file_is_the_parsed_cluster_config():
    c = cluster()
    assert tomllib.loads(c.config_toml) == c.cluster_config()


def test_the_config_checksum_does_not_depend_on_the_toml_writers_layout(monkeypatch):
    """A new tomli-w release that lays the same config out differently must not roll the masters and workers."""
    c = cluster()
    before = c.config_checksum
    relaid = types.SimpleNamespace(dumps=lambda document: tomli_w.dumps(document, indent=8))
    monkeypatch.setattr(curvine_props, "tomli_w", relaid)
    assert c.config_toml != tomli_w.dumps(c.cluster_config())
    assert c.config_checksum == before
    assert cluster(block_size="128MB").config_checksum != before


def test_construct_defaults_are_the_schema_defaults():
    """Until the schema takes its Curvine defaults from the construct side, both must agree."""
    from kvtiers.config.schema import Curvine, Serving

    schema, serving = Curvine(), Serving()
    assert CurvinePorts() == CurvinePorts(**schema.ports.model_dump())
    assert CurvineImages() == CurvineImages(**schema.images.model_dump())
    assert CurvineResources() == CurvineResources(
        **{name: Resources(cpu=size.cpu, memory_gib=size.memory_gib) for name, size in schema.resources}
    )
    eviction = schema.eviction
    assert CurvineEviction() == CurvineEviction(
        high_watermark=eviction.high_watermark, low_watermark=eviction.low_watermark, policy=eviction.policy
    )
    c = cluster()
    assert (c.namespace, c.cluster_id, c.block_size, c.fs_path, c.worker_groups) == (
        schema.namespace,
        schema.cluster_id,
        schema.block_size,
        schema.fs_path,
        schema.worker_group,
    )
    master, worker = schema.master, schema.worker
    assert (c.meta_volume_gib, c.journal_volume_gib, c.audit_log) == (
        master.meta_volume_gib,
        master.journal_volume_gib,
        master.audit_log,
    )
    assert (c.nvme_mount, c.data_dir, c.capacity_gb, c.reserved_gb) == (
        worker.nvme_mount,
        worker.data_dir,
        worker.capacity_gb,
        worker.reserved_gb,
    )
    assert (DEFAULT_CLAIM_NAME, DEFAULT_CLAIM_SIZE_GIB, DEFAULT_JANITOR_INTERVAL_SECONDS) == (
        serving.l2_claim_name,
        serving.l2_claim_size_gib,
        eviction.janitor_interval_seconds,
    )


# ------------------------------------------------------------------------------------------- the rules


def _storage_chart(**overrides) -> Callable[[], object]:
    return lambda: storage(cdk8s.Testing.app(), cluster(), **overrides)


RULES: list[tuple[str, Callable[[], object], str]] = [
    ("port in range (low)", lambda: CurvinePorts(master_rpc=0), "CurvinePorts: master_rpc must be 1 to 65535, got 0"),
    (
        "port in range (high)",
        lambda: CurvinePorts(fuse_web=65536),
        "CurvinePorts: fuse_web must be 1 to 65535, got 65536",
    ),
    ("ports distinct", lambda: CurvinePorts(journal=8995), "CurvinePorts: journal 8995 is also master_rpc's port"),
    (
        "image not latest",
        lambda: CurvineImages(runtime_image="ghcr.io/curvineio/curvine:latest"),
        "CurvineImages: runtime_image 'ghcr.io/curvineio/curvine:latest' uses the moving tag 'latest'",
    ),
    (
        "image pinned",
        lambda: CurvineImages(csi_image="ghcr.io/curvineio/curvine-csi"),
        "CurvineImages: csi_image 'ghcr.io/curvineio/curvine-csi' has no tag",
    ),
    ("cpu quantity", lambda: Resources(cpu="two", memory_gib=1), "Resources: cpu 'two' is not a CPU quantity"),
    (
        "memory at least 1 GiB",
        lambda: Resources(cpu="1", memory_gib=0),
        "Resources: memory_gib must be at least 1, got 0",
    ),
    (
        "high watermark a fraction",
        lambda: CurvineEviction(high_watermark=1.0),
        "CurvineEviction: high_watermark 1.0 must be between 0 and 1",
    ),
    (
        "low watermark a fraction",
        lambda: CurvineEviction(low_watermark=0),
        "CurvineEviction: low_watermark 0 must be between 0 and 1",
    ),
    (
        "low watermark below high",
        lambda: CurvineEviction(low_watermark=0.9),
        "CurvineEviction: low_watermark 0.9 must be below high_watermark 0.85",
    ),
    (
        "eviction policy",
        lambda: CurvineEviction(policy="fifo"),
        "CurvineEviction: policy must be one of 'lru', 'lfu', got 'fifo'",
    ),
    ("toleration key", lambda: Toleration(key=""), "Toleration: key is required"),
    ("toleration value", lambda: Toleration(key="k", value=""), "Toleration: value is empty"),
    ("toleration effect", lambda: Toleration(key="k", effect="Never"), "Toleration: effect must be one of"),
    (
        "odd master count",
        lambda: cluster(master_volumes=volumes(2)),
        "CurvineCluster: master_volumes 2 given; Curvine runs 1, 3 or 5 masters",
    ),
    ("at least one master", lambda: cluster(master_volumes=()), "CurvineCluster: master_volumes 0 given"),
    ("availability zone", lambda: cluster(availability_zone=""), "CurvineCluster: availability_zone is required"),
    ("a HyperPod group", lambda: cluster(hyperpod_groups=()), "CurvineCluster: hyperpod_groups needs at least one"),
    (
        "HyperPod groups unique",
        lambda: cluster(hyperpod_groups=("gpu", "gpu")),
        "CurvineCluster: hyperpod_groups names must be unique",
    ),
    ("worker groups not empty", lambda: cluster(worker_groups=()), "CurvineCluster: worker_groups is empty"),
    (
        "worker groups are HyperPod groups",
        lambda: cluster(worker_groups=("cpu",)),
        "CurvineCluster: worker_groups ['cpu'] not in hyperpod_groups ['gpu']",
    ),
    ("a worker node", lambda: cluster(worker_nodes=0), "CurvineCluster: worker_nodes must be at least 1, got 0"),
    ("namespace a DNS label", lambda: cluster(namespace="Curvine"), "CurvineCluster: namespace 'Curvine' is not a"),
    ("cluster id a DNS label", lambda: cluster(cluster_id="kv_tiers"), "CurvineCluster: cluster_id 'kv_tiers' is not"),
    (
        "meta volume size",
        lambda: cluster(meta_volume_gib=0),
        "CurvineCluster: meta_volume_gib must be 1 to 16384, got 0",
    ),
    (
        "journal volume size",
        lambda: cluster(journal_volume_gib=16385),
        "CurvineCluster: journal_volume_gib must be 1 to 16384, got 16385",
    ),
    ("NVMe mount absolute", lambda: cluster(nvme_mount="opt/nvme"), "CurvineCluster: nvme_mount 'opt/nvme' is not"),
    ("data dir absolute", lambda: cluster(data_dir="curvine"), "CurvineCluster: data_dir 'curvine' is not an abs"),
    (
        "data dir below the NVMe mount",
        lambda: cluster(data_dir="/var/curvine"),
        "CurvineCluster: data_dir '/var/curvine' must be below nvme_mount '/opt/dlami/nvme'",
    ),
    ("capacity", lambda: cluster(capacity_gb=0), "CurvineCluster: capacity_gb must be at least 1, got 0"),
    ("reserved space", lambda: cluster(reserved_gb=-1), "CurvineCluster: reserved_gb must be at least 0, got -1"),
    ("block size", lambda: cluster(block_size="64M"), "CurvineCluster: block_size '64M' is not a size"),
    ("fs path absolute", lambda: cluster(fs_path="l2cache"), "CurvineCluster: fs_path 'l2cache' is not an absolute"),
    (
        "claim outside the Curvine namespace",
        _storage_chart(serving_namespace="curvine"),
        "CurvineStorageChart: serving_namespace 'curvine' is the Curvine namespace",
    ),
    (
        "serving namespace a DNS label",
        _storage_chart(serving_namespace="Serving"),
        "CurvineStorageChart: serving_namespace 'Serving' is not a DNS-1123 label",
    ),
    (
        "janitor image pinned",
        _storage_chart(janitor_image="lmcache/vllm-openai:latest"),
        "CurvineStorageChart: janitor_image 'lmcache/vllm-openai:latest' uses the moving tag 'latest'",
    ),
    ("claim name", _storage_chart(claim_name="L2"), "CurvineStorageChart: claim_name 'L2' is not a DNS-1123 label"),
    ("claim size", _storage_chart(claim_size_gib=0), "CurvineStorageChart: claim_size_gib must be at least 1, got 0"),
    (
        "janitor interval",
        _storage_chart(janitor_interval_seconds=5),
        "CurvineStorageChart: janitor_interval_seconds must be at least 60, got 5",
    ),
]


@pytest.mark.parametrize(("build", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rule(build, message):
    with pytest.raises(ValueError) as raised:
        build()
    assert str(raised.value).startswith(message), str(raised.value)


def test_the_minimal_arguments_pass_every_rule():
    cluster(master_volumes=volumes(5), worker_groups=("gpu",), tolerations=(Toleration(key="k", value="v"),))
    storage(cdk8s.Testing.app(), cluster())
