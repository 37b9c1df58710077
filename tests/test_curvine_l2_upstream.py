"""The Curvine L2 objects against what Curvine v0.4.1 and csi-provisioner v5.2.0 require, read from their source.

Each test names the upstream file (at the pinned tag) whose behaviour it guards; ``docs/curvine-contract.md`` maps
every setting to its test. Curvine cannot run here, so the rendered objects are checked against those facts.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from kvtiers.config import load_environment, model
from kvtiers.k8s_charts.curvine_l2.props import (
    CONF_PATH,
    CSI_HOME,
    FUSE_CONF_PATH,
    MOUNT_MODE,
    PROVISIONER_TIMEOUT_S,
    SERVER_BINARY,
    SERVER_HOME,
    port_table,
)
from kvtiers.k8s_charts.names import CURVINE_CSI_CONTROLLER as CSI_CONTROLLER
from kvtiers.k8s_charts.names import CURVINE_CSI_NODE as CSI_NODE
from kvtiers.k8s_charts.names import CURVINE_MASTER as MASTER
from kvtiers.k8s_charts.names import CURVINE_WORKER as WORKER
from tests.conftest import CONFIG_DIR
from tests.test_curvine_l2_charts import container, objects, props_for, render, render_env
from tests.upstream import require_upstream, upstream_text

CURVINE = "CurvineIO/curvine@v0.4.1"
RUNTIME_DOCKERFILE = "curvine-docker/deploy/Dockerfile_rocky9"


def curvine_source(path: str) -> str:
    """A file of Curvine at the pinned tag, from its mirror; Curvine is on no package registry, so without the mirror
    the upstream half of a test skips (its rendered half has run by then)."""
    return require_upstream(f"{CURVINE}:{path}")


@pytest.fixture(scope="module", params=["dev.yaml", "prod.yaml"])
def rendered(request):
    env = load_environment(CONFIG_DIR / request.param)
    props = props_for(env)
    return env, props, render(env, props)


def _named(charts: dict, kind: str, name: str) -> dict:
    return next(o for o in objects(charts, kind) if o["metadata"]["name"] == name)


def _env(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env", [])}


def _config(charts: dict) -> dict:
    return tomllib.loads(objects(charts, "ConfigMap")[0]["data"]["curvine-cluster.toml"])


def _field(c: dict, var: str) -> str:
    """The downward-API field a variable comes from, following one ``$(OTHER)`` indirection."""
    env = _env(c)
    entry = env[var]
    if "value" in entry:
        ref = entry["value"]
        assert ref.startswith("$(") and ref.endswith(")"), f"{var}={ref!r} is not a node-derived value"
        entry = env[ref[2:-1]]
    return entry["valueFrom"]["fieldRef"]["fieldPath"]


def _rules(charts: dict, kind: str, name: str) -> list[dict]:
    matches = [o for o in objects(charts, kind) if o["metadata"]["name"] == name]
    return matches[0]["rules"] if matches else []


def _allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


# ---------------------------------------------------------------- blocking: curvine-csi/pkg/csi/driver.go


def test_csi_controller_runs_embedded_so_it_does_not_exit(rendered):
    """driver.go defaults MOUNT_MODE to standalone, which exits without STANDALONE_SERVICE_ACCOUNT
    (node_standalone.go); curvine-csi/deploy/deployment.yaml sets embedded on the controller."""
    _, _, charts = rendered
    plugin = container(_named(charts, "Deployment", CSI_CONTROLLER), "csi-plugin")
    assert _env(plugin)["MOUNT_MODE"]["value"] == MOUNT_MODE == "embedded"
    driver = curvine_source("curvine-csi/pkg/csi/driver.go")
    assert 'mountMode = "standalone"' in driver and 'case "embedded":' in driver
    deployment = curvine_source("curvine-csi/deploy/deployment.yaml")
    assert re.search(r'name: MOUNT_MODE\s+value: "embedded"', deployment)


def test_every_csi_plugin_container_knows_its_namespace(rendered):
    """node.go / node_standalone.go fall back to the namespace ``curvine`` for their state without KUBERNETES_NAMESPACE."""
    _, _, charts = rendered
    for workload in (_named(charts, "Deployment", CSI_CONTROLLER), _named(charts, "DaemonSet", CSI_NODE)):
        assert _field(container(workload, "csi-plugin"), "KUBERNETES_NAMESPACE") == "metadata.namespace"


def test_provisioner_can_sync_its_volumeattachment_informer(rendered):
    """controller.go advertises PUBLISH_UNPUBLISH_VOLUME: csi-provisioner v5.2.0 then waits for a VolumeAttachment
    informer (cmd/csi-provisioner/csi-provisioner.go); deploy/kubernetes/rbac.yaml grants these verbs."""
    _, _, charts = rendered
    rules = _rules(charts, "ClusterRole", CSI_CONTROLLER)
    for verb in ("get", "list", "watch"):
        assert _allows(rules, "storage.k8s.io", "volumeattachments", verb)
    assert _allows(rules, "", "persistentvolumes", "patch")


def test_provisioner_timeout_covers_the_first_create_volume(rendered):
    """CreateVolume runs curvine-cli with ExecuteWithRetry (controller.go, utils.go): the 10 s default is too short."""
    _, _, charts = rendered
    provisioner = container(_named(charts, "Deployment", CSI_CONTROLLER), "csi-provisioner")
    timeouts = [a.split("=", 1)[1] for a in provisioner["args"] if a.startswith("--timeout=")]
    assert timeouts == [f"{PROVISIONER_TIMEOUT_S}s"] and PROVISIONER_TIMEOUT_S >= 60
    upstream = re.findall(r"--timeout=(\d+)s", curvine_source("curvine-csi/deploy/deployment.yaml"))
    assert upstream and PROVISIONER_TIMEOUT_S >= max(int(t) for t in upstream)


def test_storage_class_does_not_offer_expansion(rendered):
    """controller.go: ControllerExpandVolume returns Unimplemented, so a resize would hang."""
    _, _, charts = rendered
    assert objects(charts, "StorageClass")[0]["allowVolumeExpansion"] is False


# ------------------------------------------------------------------- locality: local_worker_policy.rs


def test_node_plugin_runs_fuse_embedded_with_the_node_environment(rendered):
    """Standalone FUSE pods get no environment (standalone_manager.go); embedded FUSE children inherit the CSI
    container's (fuse_manager.go), so the client hostname can be set per node."""
    _, _, charts = rendered
    plugin = container(_named(charts, "DaemonSet", CSI_NODE), "csi-plugin")
    env = _env(plugin)
    assert env["MOUNT_MODE"]["value"] == "embedded"
    assert not [name for name in env if name.startswith("STANDALONE_")]


def test_fuse_client_and_worker_name_themselves_by_the_same_node_value(rendered):
    """local_worker_policy.rs picks the worker whose address ``is_local`` (worker_address.rs: hostname string
    equality) to the client's hostname; both come from CURVINE_*_HOSTNAME (cluster_conf.rs)."""
    _, _, charts = rendered
    worker = container(_named(charts, "DaemonSet", "curvine-worker"), "worker")
    plugin = container(_named(charts, "DaemonSet", CSI_NODE), "csi-plugin")
    assert _field(worker, "CURVINE_WORKER_HOSTNAME") == _field(plugin, "CURVINE_CLIENT_HOSTNAME") == "status.hostIP"
    # net_interface would override both env variables (cluster_conf.rs): it must stay unset
    assert not _config(charts).get("net_interface")


def test_short_circuit_is_off_because_fuse_cannot_see_the_worker_path(rendered):
    """block_writer.rs opens the worker's data path directly when short_circuit is on and the worker is local; the
    CSI container does not mount the NVMe, so short-circuit must be off and writes go through the worker's RPC."""
    _, props, charts = rendered
    assert _config(charts)["client"]["short_circuit"] is False
    node = _named(charts, "DaemonSet", CSI_NODE)["spec"]["template"]["spec"]
    assert not [v for v in node["volumes"] if v.get("hostPath", {}).get("path", "").startswith(props.data_dir)]


def test_fuse_reads_the_cluster_config(rendered):
    """curvine-fuse reads ``conf/curvine-cluster.toml`` relative to its working directory (mount_args.rs) and
    the CSI starts it without --conf (fuse_manager.go): the ConfigMap must sit there in the CSI container."""
    _, _, charts = rendered
    for workload in (_named(charts, "DaemonSet", CSI_NODE), _named(charts, "Deployment", CSI_CONTROLLER)):
        plugin = container(workload, "csi-plugin")
        mount = next(m for m in plugin["volumeMounts"] if m["name"] == "config")
        assert mount["mountPath"] == f"{plugin['workingDir']}/conf/curvine-cluster.toml" == FUSE_CONF_PATH
        volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
        assert volume["configMap"]["name"] == objects(charts, "ConfigMap")[0]["metadata"]["name"]
    default = re.search(r'default_value = "([^"]+)"', curvine_source("curvine-fuse/src/cli/mount_args.rs"))
    workdirs = re.findall(r"^WORKDIR (\S+)", curvine_source("curvine-csi/Dockerfile"), re.MULTILINE)
    assert default and workdirs
    assert FUSE_CONF_PATH == f"{workdirs[-1]}/{default.group(1)}" == f"{CSI_HOME}/{default.group(1)}"


def test_node_plugin_rbac_matches_embedded_mode(rendered):
    """Embedded mode runs no PV watcher and no FUSE pods (those are node_standalone.go / standalone_manager.go), and
    gets no Secrets: with them it would reload a dead FUSE PID after a restart and never re-mount (mount_state.go,
    node.go NodePublishVolume re-stages only when the PID is 0); without them load/save only warn."""
    _, _, charts = rendered
    assert not _rules(charts, "Role", CSI_NODE)
    assert not _rules(charts, "ClusterRole", CSI_NODE)
    assert _named(charts, "ServiceAccount", CSI_NODE)


def test_node_plugin_is_never_replaced_by_a_deploy(rendered):
    """Its pod hosts the node's FUSE processes: a rollout would break every L2 mount on the node."""
    _, _, charts = rendered
    node = _named(charts, "DaemonSet", CSI_NODE)
    assert node["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert "livenessProbe" not in container(node, "csi-plugin")


def test_master_and_worker_preempt_serving_pods(rendered):
    _, _, charts = rendered
    master, worker = _named(charts, "StatefulSet", MASTER), _named(charts, "DaemonSet", WORKER)
    assert master["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    assert worker["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


def test_no_client_ttl_because_it_would_expire_the_l2_directories(rendered):
    """A client TTL applies to directories too (``fuse_utils.rs`` ``mkdir_opts`` builds MkdirOpts from the client
    config) and an expired directory is deleted with its contents (``inode_view.rs`` ``is_expired`` by mtime,
    ``ttl_executor.rs``): the L2 root and LMCache's per-pod temporary directories would vanish."""
    _, props, _ = rendered
    client = tomllib.loads(props.config_toml)["client"]
    assert "ttl_ms" not in client and "ttl_action" not in client


def test_the_janitor_evicts_the_claim_between_the_watermarks(rendered):
    """v0.4.1's quota eviction deletes only expired files (``quota_manager.rs`` -> ``ttl_executor.rs``
    ``execute_by_id``), so a janitor pod on the claim evicts chunk files instead (l2_janitor.py). Its command line is
    parsed by the janitor's own parser, and names what the cluster has: the claim, the capacity and watermarks, every
    master's web port (``router_handler.rs`` routes), the StorageClass's ``fs-path`` (the CSI driver puts the volume's
    directory below it: ``controller.go`` ``GetCurvinePath``) and the worker count."""
    from kvtiers.k8s_charts.curvine_l2 import l2_janitor

    env, _props, charts = rendered
    deployment = _named(charts, "Deployment", "curvine-l2-janitor")
    assert deployment["metadata"]["namespace"] == env.serving.namespace
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (janitor,) = pod["containers"]
    mount = next(m["mountPath"] for m in janitor["volumeMounts"] if m["name"] == "l2")
    claim = next(v for v in pod["volumes"] if v["name"] == "l2")["persistentVolumeClaim"]["claimName"]
    assert claim == env.serving.l2_claim_name
    args = l2_janitor.parse(janitor["args"])
    assert (args.root, args.capacity_bytes, args.high, args.low, args.interval) == (
        mount,
        model.sizing(env).curvine_workers * env.curvine.worker.capacity_gb * 1000**3,
        env.curvine.eviction.high_watermark,
        env.curvine.eviction.low_watermark,
        env.curvine.eviction.janitor_interval_seconds,
    )
    service = _named(charts, "Service", MASTER)
    web = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "web")
    hosts = [
        f"{MASTER}-{i}.{MASTER}.{env.curvine.namespace}.svc.cluster.local" for i in range(env.curvine.master.replicas)
    ]
    assert args.masters.split(",") == [f"http://{h}:{web}" for h in hosts]
    storage_class = objects(charts, "StorageClass")[0]
    assert args.fs_path == storage_class["parameters"]["fs-path"] and args.workers == model.sizing(env).curvine_workers
    assert janitor["ports"] == [{"name": "metrics", "containerPort": args.metrics_port}]
    script = _named(charts, "ConfigMap", "curvine-l2-janitor")["data"]
    assert janitor["command"][1].rsplit("/", 1)[1] in script


# ------------------------------------------------------------------------------------ lifecycle


def test_servers_run_the_binary_directly_with_signals_and_stdout_logs(rendered):
    """entrypoint.sh keeps bash as PID 1 (no exec, no trap) and tees into an unrotated file; curvine-server installs
    a SIGTERM handler itself (rpc_server.rs), and logs go to stdout by default (logger.rs)."""
    _, _, charts = rendered
    config = _config(charts)
    for kind, name, service in (("StatefulSet", "curvine-master", "master"), ("DaemonSet", "curvine-worker", "worker")):
        workload = _named(charts, kind, name)
        c = container(workload, service)
        assert c["command"] == [SERVER_BINARY]
        home = re.search(r"^ENV CURVINE_HOME=(\S+)", curvine_source(RUNTIME_DOCKERFILE), re.MULTILINE)
        assert home and SERVER_BINARY == f"{home.group(1)}/lib/curvine-server" == f"{SERVER_HOME}/lib/curvine-server"
        assert c["args"] == ["--service", service, "--conf", CONF_PATH]
        assert _env(c)["ORPC_BIND_HOSTNAME"]["value"] == "0.0.0.0"
        assert workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
        assert "log_dir" not in config.get("log", {}) or config["log"]["log_dir"] == "stdout"


def test_master_audit_log_follows_the_setting(rendered, dev_env):
    """master_conf.rs turns the audit log on by default: one line per file operation, i.e. per LMCache chunk."""
    env, _, charts = rendered
    assert _config(charts)["master"]["audit_logging_enabled"] is env.curvine.master.audit_log is False
    master = dev_env.curvine.master.model_copy(update={"audit_log": True})
    on = render_env(dev_env.model_copy(update={"curvine": dev_env.curvine.model_copy(update={"master": master})}))
    assert _config(on)["master"]["audit_logging_enabled"] is True


def test_a_single_master_has_no_disruption_budget(dev_env):
    """maxUnavailable 0 on one master blocks every drain of its node."""
    assert dev_env.curvine.master.replicas == 1
    assert not objects(render_env(dev_env), "PodDisruptionBudget")


# ------------------------------------------------------------------------------------------ ports


def test_port_table_covers_every_port_and_says_where_it_listens(rendered):
    """One table for the security groups and NetworkPolicies: every configured Curvine port, host or pod network."""
    env, props, charts = rendered
    table = port_table(props.ports)
    assert {p.port for p in table} == set(env.curvine.ports.model_dump().values())
    worker = _named(charts, "DaemonSet", "curvine-worker")["spec"]["template"]["spec"]
    node = _named(charts, "DaemonSet", CSI_NODE)["spec"]["template"]["spec"]
    master = _named(charts, "StatefulSet", "curvine-master")["spec"]["template"]["spec"]
    listens = {"worker": worker, "fuse": node, "master": master, "journal": master}
    for entry in table:
        spec = listens[entry.listener]
        assert entry.network == ("host" if spec.get("hostNetwork") else "pod"), entry
        assert entry.reached_by, entry


def test_master_count_is_announced_at_synth_as_fixed_at_install(dev_synth):
    """Raft membership comes from ``journal_addrs`` at install (journal_conf.rs); synth cannot see the deployed count,
    so every synth says it (upstream helm refuses the change: validateMasterReplicasOnUpgrade in curvine-runtime)."""
    from aws_cdk.assertions import Annotations, Match

    infos = Annotations.from_stack(dev_synth.graph.workloads).find_info(
        "*", Match.string_like_regexp("Curvine master count 1 is fixed at install")
    )
    assert len(infos) == 1 and "docs/curvine-contract.md" in str(infos[0].entry.data)


def test_fuse_logs_rotate_through_curvines_own_settings(rendered):
    """curvine-fuse logs through ``[fuse.log]`` (``mount_run.rs``), a ``LogConf`` (``logger.rs``): into rotated files in
    a directory that exists in the CSI containers (the appender panics on a missing one), bounded in size, instead of
    the CSI driver's never-rotated redirect of its stdout (``fuse_manager.go``)."""
    from kvtiers.k8s_charts.curvine_l2.props import FUSE_LOG_BOUND_MIB

    _env, _props, charts = rendered
    log = _config(charts)["fuse"]["log"]
    log_conf_fields = {
        "level",
        "log_dir",
        "file_name",
        "max_log_files",
        "max_file_size_mb",
        "time_rotation",
        "display_thread",
        "display_position",
        "targets",
    }
    assert set(log) <= log_conf_fields and log["max_file_size_mb"] > 0 and log["log_dir"] == "/tmp"
    source = upstream_text(f"{CURVINE}:crates/core/runtime/src/common/logger.rs")
    if source is not None:  # with the mirror: the fields as v0.4.1 declares them
        assert all(f"pub {field}:" in source for field in log_conf_fields)
    assert (log["max_log_files"] + 1) * log["max_file_size_mb"] == FUSE_LOG_BOUND_MIB <= 512
    node = _named(charts, "DaemonSet", CSI_NODE)
    plugin = container(node, "csi-plugin")
    # the node plugin's own writable layer: no volume there whose size limit could evict the pod and its mounts
    assert not any(m["mountPath"] == "/tmp" for m in plugin["volumeMounts"])
    controller = _named(charts, "Deployment", CSI_CONTROLLER)
    tmp = next(v for v in controller["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp")
    assert int(tmp["emptyDir"]["sizeLimit"].removesuffix("Gi")) * 1024 > FUSE_LOG_BOUND_MIB  # validate-config


def test_a_fuse_setting_does_not_roll_the_masters_and_workers():
    """Masters and workers never read ``[fuse]`` (``master_server.rs`` and ``worker_server.rs`` take their own
    ``log``); their pods' config checksum leaves it out, so a FUSE change never restarts the Raft group."""
    import dataclasses

    env = load_environment(CONFIG_DIR / "prod.yaml")
    props = props_for(env)
    other_port = dataclasses.replace(props.ports, fuse_web=props.ports.fuse_web + 100)
    assert dataclasses.replace(props, ports=other_port).config_checksum == props.config_checksum
    assert dataclasses.replace(props, block_size="32MB").config_checksum != props.config_checksum
