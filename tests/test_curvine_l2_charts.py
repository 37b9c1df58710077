"""The Curvine L2 charts: Kubernetes 1.34 schemas (strict), the rendered TOML agrees with the objects, the static
PersistentVolumes reference the CDK volumes, and the deploy order holds in the template."""

from __future__ import annotations

import copy
import re
import tomllib

import cdk8s
import kubernetes_validate
import pytest
import yaml

from kvtiers.config import load_environment
from kvtiers.config.model import curvine_settings
from kvtiers.k8s_charts.curvine_l2 import (
    CurvineCluster,
    CurvineCsiChart,
    CurvineMasterChart,
    CurvineStorageChart,
    CurvineWorkerChart,
    MasterVolumeIds,
    Toleration,
)
from kvtiers.k8s_charts.curvine_l2.props import DATA_MOUNT, JOURNAL_MOUNT, META_MOUNT
from kvtiers.k8s_charts.names import CURVINE_MASTER as MASTER
from tests.conftest import CONFIG_DIR


def props_for(env) -> CurvineCluster:
    """The environment's Curvine as the CurvineL2 construct places it, with literal volume IDs instead of deploy-time
    tokens."""
    workers = env.curvine_worker_groups
    taints = sorted({(t.key, t.value, t.effect) for g in env.hyperpod.instance_groups for t in g.taints})
    return CurvineCluster(
        **curvine_settings(env).settings(),
        master_volumes=tuple(
            MasterVolumeIds(meta_volume_id=f"vol-meta{i}", journal_volume_id=f"vol-journal{i}")
            for i in range(env.curvine.master.replicas)
        ),
        availability_zone="us-east-1b",
        hyperpod_groups=tuple(g.name for g in env.hyperpod.instance_groups),
        worker_nodes=sum(g.count for g in workers),
        worker_groups=None if env.curvine.worker_group is None else (env.curvine.worker_group,),
        tolerations=tuple(Toleration(key=k, value=v or None, effect=e) for k, v, e in taints),
    )


def render(env, cluster: CurvineCluster) -> dict[str, list[dict]]:
    app = cdk8s.App()
    charts = {
        cls.__name__: cls(app, cls.__name__.lower(), cluster=cluster)
        for cls in (CurvineMasterChart, CurvineWorkerChart, CurvineCsiChart)
    }
    charts["CurvineStorageChart"] = CurvineStorageChart(
        app,
        "curvinestoragechart",
        cluster=cluster,
        serving_namespace=env.serving.namespace,
        janitor_image=env.serving.images.vllm_image,
        claim_name=env.serving.l2_claim_name,
        claim_size_gib=env.serving.l2_claim_size_gib,
        janitor_interval_seconds=env.curvine.eviction.janitor_interval_seconds,
    )
    return {name: chart.to_json() for name, chart in charts.items()}


def render_env(env) -> dict[str, list[dict]]:
    return render(env, props_for(env))


@pytest.fixture(scope="module", params=["dev.yaml", "prod.yaml"])
def rendered(request):
    env = load_environment(CONFIG_DIR / request.param)
    props = props_for(env)
    return env, props, render(env, props)


def objects(charts: dict[str, list[dict]], kind: str) -> list[dict]:
    return [o for objs in charts.values() for o in objs if o["kind"] == kind]


def container(obj: dict, name: str) -> dict:
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def test_every_object_passes_the_kubernetes_133_schemas_strictly(rendered):
    _, _, charts = rendered
    for objs in charts.values():
        for obj in objs:
            kubernetes_validate.validate(obj, "1.34", strict=True)


def test_strict_validation_catches_a_misspelled_field(rendered):
    _, _, charts = rendered
    bad = copy.deepcopy(objects(charts, "StatefulSet")[0])
    bad["spec"]["replicaz"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.34", strict=True)


def test_toml_parses_and_agrees_with_the_objects(rendered):
    env, props, charts = rendered
    config = tomllib.loads(objects(charts, "ConfigMap")[0]["data"]["curvine-cluster.toml"])
    ports = env.curvine.ports
    service = objects(charts, "Service")[0]
    statefulset = objects(charts, "StatefulSet")[0]
    assert statefulset["spec"]["replicas"] == env.curvine.master.replicas == len(config["journal"]["journal_addrs"])
    hosts = [
        f"{MASTER}-{i}.{service['metadata']['name']}.{env.curvine.namespace}.svc.cluster.local"
        for i in range(props.masters)
    ]
    assert [a["hostname"] for a in config["journal"]["journal_addrs"]] == hosts
    assert [a["hostname"] for a in config["client"]["master_addrs"]] == hosts
    assert {a["port"] for a in config["journal"]["journal_addrs"]} == {ports.journal}
    assert {a["port"] for a in config["client"]["master_addrs"]} == {ports.master_rpc}
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "rpc": ports.master_rpc,
        "journal": ports.journal,
        "web": ports.master_web,
    }
    assert config["master"]["rpc_port"] == ports.master_rpc and config["master"]["web_port"] == ports.master_web
    assert config["worker"]["rpc_port"] == ports.worker_rpc and config["worker"]["web_port"] == ports.worker_web
    assert config["fuse"]["web_port"] == ports.fuse_web
    master = container(statefulset, "master")
    assert master["readinessProbe"]["tcpSocket"]["port"] == ports.master_rpc
    # meta and journal live in subdirectories of their volumes, never the root
    mounts = {m["name"]: m["mountPath"] for m in master["volumeMounts"]}
    assert config["master"]["meta_dir"] == f"{mounts['meta']}/db" and mounts["meta"] == META_MOUNT
    assert config["journal"]["journal_dir"] == f"{mounts['journal']}/db" and mounts["journal"] == JOURNAL_MOUNT
    assert any(e["name"] == "CURVINE_MASTER_HOSTNAME" for e in master["env"])
    # eviction so the L2 can never fill the NVMe (LMCache's fs:// connector never deletes)
    assert config["master"]["enable_quota_eviction"] is True and config["master"]["quota_eviction_mode"] == "delete"
    assert config["master"]["quota_eviction_high_rate"] == env.curvine.eviction.high_watermark
    # worker data dir: capacity from config, on the NVMe hostPath
    worker = objects(charts, "DaemonSet")[0]
    assert config["worker"]["data_dir"] == [f"[SSD:{env.curvine.worker.capacity_gb}GB]{DATA_MOUNT}"]
    nvme = next(v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "nvme")
    assert nvme["hostPath"] == {"path": env.curvine.worker.nvme_mount, "type": "Directory"}
    data = next(m for m in container(worker, "worker")["volumeMounts"] if m["mountPath"] == DATA_MOUNT)
    assert f"{nvme['hostPath']['path']}/{data['subPath']}" == env.curvine.worker.data_dir


def test_config_change_rolls_the_pods(rendered):
    env, props, charts = rendered
    annotation = objects(charts, "StatefulSet")[0]["spec"]["template"]["metadata"]["annotations"][
        "kvtiers.io/config-sha256"
    ]
    other = props_for(env.model_copy(update={"curvine": env.curvine.model_copy(update={"block_size": "128MB"})}))
    assert other.config_checksum != annotation == props.config_checksum


def test_persistent_volumes_use_the_cdk_volumes_in_the_hyperpod_zone(rendered):
    _env, props, charts = rendered
    pvs = objects(charts, "PersistentVolume")
    assert len(pvs) == 2 * props.masters
    handles = {pv["spec"]["csi"]["volumeHandle"] for pv in pvs}
    assert handles == {v for pair in props.master_volumes for v in (pair.meta_volume_id, pair.journal_volume_id)}
    for pv in pvs:
        assert pv["spec"]["csi"]["driver"] == "ebs.csi.aws.com"
        term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert term == {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}
        kind, ordinal = pv["spec"]["claimRef"]["name"].split(f"-{MASTER}-")
        assert kind in ("meta", "journal") and 0 <= int(ordinal) < props.masters
    templates = [t["metadata"]["name"] for t in objects(charts, "StatefulSet")[0]["spec"]["volumeClaimTemplates"]]
    assert templates == ["meta", "journal"]


def test_claim_and_storage_class_agree_on_the_curvine_path(rendered):
    env, _props, charts = rendered
    storage_class = objects(charts, "StorageClass")[0]
    claim = objects(charts, "PersistentVolumeClaim")[0]
    assert claim["spec"]["storageClassName"] == storage_class["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"] == {"name": env.serving.l2_claim_name, "namespace": env.serving.namespace}
    assert storage_class["provisioner"] == objects(charts, "CSIDriver")[0]["metadata"]["name"] == "curvine"
    assert storage_class["parameters"]["fs-path"] == env.curvine.fs_path
    assert storage_class["parameters"]["master-addrs"].split(",") == [
        f"{a['hostname']}:{a['port']}"
        for a in tomllib.loads(objects(charts, "ConfigMap")[0]["data"]["curvine-cluster.toml"])["client"][
            "master_addrs"
        ]
    ]


def test_csi_node_is_privileged_bidirectional_and_embedded(rendered):
    _, _, charts = rendered
    node = objects(charts, "DaemonSet")[1]
    plugin = container(node, "csi-plugin")
    assert plugin["securityContext"]["privileged"] is True
    kubelet = next(m for m in plugin["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet")
    assert kubelet["mountPropagation"] == "Bidirectional"
    assert {"name": "MOUNT_MODE", "value": "embedded"} in plugin["env"]
    driver = objects(charts, "CSIDriver")[0]
    assert driver["spec"]["attachRequired"] is False


def test_every_container_is_pinned_and_bounded(rendered):
    _, _, charts = rendered
    for obj in [*objects(charts, "StatefulSet"), *objects(charts, "DaemonSet"), *objects(charts, "Deployment")]:
        for c in obj["spec"]["template"]["spec"]["containers"]:
            assert ":" in c["image"].rsplit("/", 1)[-1] and not c["image"].endswith(":latest")
            assert c["resources"]["requests"] == c["resources"]["limits"]
            assert {"cpu", "memory"} <= c["resources"]["limits"].keys()
        images = {c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}
        if obj["metadata"]["name"] == "curvine-l2-janitor":
            continue  # the janitor runs in the engine image (Python, already on the GPU nodes)
        assert all(i.startswith(("ghcr.io/curvineio/", "registry.k8s.io/sig-storage/")) for i in images)


def test_rbac_is_namespaced_where_it_can_be(rendered):
    _, _, charts = rendered
    for role in objects(charts, "ClusterRole"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not ({"pods", "configmaps", "secrets"} & set(rule["resources"]))


def test_three_masters_render_three_journal_peers(dev_env):
    curvine = dev_env.curvine.model_copy(update={"master": dev_env.curvine.master.model_copy(update={"replicas": 3})})
    charts = render_env(dev_env.model_copy(update={"curvine": curvine}))
    config = tomllib.loads(objects(charts, "ConfigMap")[0]["data"]["curvine-cluster.toml"])
    assert [a["id"] for a in config["journal"]["journal_addrs"]] == [1, 2, 3]
    assert objects(charts, "PodDisruptionBudget")[0]["spec"]["maxUnavailable"] == 1


# ------------------------------------------------------------------------------------ in the deploy graph


def test_manifests_are_ordered_after_the_ebs_csi_driver(dev_synth):
    resources = dev_synth.template_json(dev_synth.graph.workloads)["Resources"]
    ids = {
        name: next(k for k in resources if re.fullmatch(rf"{name}[0-9A-F]{{8}}", k))
        for name in (
            "ServingNamespace",
            "CurvineMasters",
            "CurvineWorkers",
            "CurvineCsi",
            "CurvineStorage",
            "EndpointQwen27b",
        )
    }

    def depends(name: str) -> set[str]:
        return set(resources[ids[name]].get("DependsOn", []))

    assert ids["CurvineMasters"] in depends("CurvineWorkers")
    assert ids["CurvineWorkers"] in depends("CurvineCsi")
    assert {ids["CurvineCsi"], ids["ServingNamespace"]} <= depends("CurvineStorage")
    assert ids["CurvineStorage"] in depends("EndpointQwen27b")
    # masters wait for the EBS CSI add-on, which waits for the HyperPod cluster: the stack dependency carries it
    workloads = dev_synth.graph.workloads
    assert dev_synth.graph.platform in workloads.dependencies
    platform = dev_synth.template_json(dev_synth.graph.platform)["Resources"]
    addon = next(
        k
        for k, r in platform.items()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "aws-ebs-csi-driver"
    )
    assert any(platform[d]["Type"] == "AWS::SageMaker::Cluster" for d in platform[addon]["DependsOn"])


def test_persistent_volumes_in_the_template_reference_the_volume_resources(dev_synth):
    path = next((dev_synth.outdir / "k8s").rglob("persistentvolume-*meta-curvine-master-0.yaml"))
    pv = yaml.safe_load(path.read_text())
    handle = pv["spec"]["csi"]["volumeHandle"]
    assert "CurvineL2JournalMaster0Meta" in handle


def test_the_janitor_pod_rolls_when_its_script_changes(rendered):
    """The script is a ConfigMap volume: a running janitor keeps the code it started with, so without a checksum on
    its pod template a fix of the janitor would never run until something else restarted the pod."""
    import hashlib

    _, _, charts = rendered
    script = next(o for o in objects(charts, "ConfigMap") if o["metadata"]["name"] == "curvine-l2-janitor")
    janitor = next(o for o in objects(charts, "Deployment") if o["metadata"]["name"] == "curvine-l2-janitor")
    annotations = janitor["spec"]["template"]["metadata"].get("annotations", {})
    expected = hashlib.sha256(script["data"]["l2_janitor.py"].encode()).hexdigest()
    assert annotations.get("kvtiers.io/janitor-script-sha256") == expected
