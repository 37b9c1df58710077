"""Node changes mapped to the pods on the nodes (kvtiers.change.groups, kvtiers.change.system_nodes), on hand-made
placement records and templates: the worst pick of the nodes a scale-down terminates, every node of an instance type
change, pods the new nodes cannot hold until the workloads stack is deployed, a replaced system node group and a
Kubernetes version change. Real synths: tests/test_change_matrix_nodes.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvtiers.change.cloudformation import resource_changes
from kvtiers.change.groups import group_changes, stopped
from kvtiers.change.record import GroupRecord, PlacedRecord, write_placement_record
from kvtiers.change.system_nodes import nodegroup_replacements, version_changes
from kvtiers.cli.main import app
from tests.test_cli_diff import assembly, engine

ENGINE = "Deployment serving/chat-engine"
WORKER = "DaemonSet curvine/curvine-worker"
MASTER = "StatefulSet curvine/curvine-master"


def placed(name: str, spread: str, replicas: int = 1, gpus: int = 0, **extra) -> PlacedRecord:
    return PlacedRecord(name=name, groups=["g6e-mid"], spread=spread, replicas=replicas, gpus=gpus, **extra)


def mid(count: int, *, masters: int = 3, engines: int = 3, instance_type: str = "ml.g6e.12xlarge") -> GroupRecord:
    """A worker group like prod's g6e-mid: engines of two GPUs spread on the node name, a Curvine worker on every
    node, masters one to a node, the janitor anywhere."""
    workloads = [
        placed(ENGINE, "gpu_bound", engines, 2, spread_evenly=True, engines_of="chat"),
        placed(WORKER, "every_node"),
        placed(MASTER, "one_per_node", masters),
        placed("Deployment serving/curvine-l2-janitor", "any_node"),
        placed("DaemonSet kube-system/aws-node", "every_node"),
    ]
    return GroupRecord(
        instance_type=instance_type,
        count=count,
        threads_per_core=2,
        fullest={"gpus": "4 of 4"},
        workloads=[w.name for w in workloads],
        gpus_per_node=4,
        placed=workloads,
    )


def test_the_worst_pick_of_nodes_holds_the_most_of_each_workload():
    group = mid(3, engines=5)
    spread_engine, worker, masters, janitor, _ = group.placed
    # 5 engines on 3 nodes: 1 on every node, 2 nodes with a second one.
    assert [stopped(spread_engine, group, k).pods for k in (1, 2, 3)] == [2, 4, 5]
    assert stopped(worker, group, 2).pods == 2
    assert stopped(masters, group, 1).pods == 1
    assert stopped(janitor, group, 1).pods == 1
    operator = PlacedRecord(name="op", groups=["g6e-mid"], spread="gpu_bound", replicas=6, gpus=1)
    assert stopped(operator, group, 1).pods == 4  # as many as a node's 4 GPUs take


def test_a_scale_down_stops_an_engine_a_worker_and_a_master_and_leaves_a_master_pending_meanwhile():
    (change,) = group_changes({"g6e-mid": mid(3)}, {"g6e-mid": mid(2, masters=1)}, l2_endpoints=["chat", "other"])
    assert change.nodes_lost == 1 and change.engine_pods_lost == 1
    pods = "\n".join(change.pods)
    assert f"up to 1 of 3 engine pod(s) of chat ({ENGINE}) stop: their L0/L1 caches are lost" in pods
    assert "1 of 3 Curvine worker(s) stop" in pods and "the L2 of chat, other goes partly cold (up to 1/3" in pods
    assert "up to 1 of 3 Curvine master(s) stop: the other 2 keep the Raft quorum" in pods
    assert "may run there and restart on another node: Deployment serving/curvine-l2-janitor (1)" in pods
    assert "aws-node" not in pods
    # The nodes go in the platform stack, before the workloads stack moves to one master.
    assert f"{MASTER}: 1 of 3 pod(s) stay Pending" in change.unplaceable[0]


def test_an_instance_type_change_replaces_every_node_and_takes_the_whole_l2_and_the_only_master():
    before, after = mid(2, masters=1, engines=2), mid(2, masters=1, engines=2, instance_type="ml.g6e.24xlarge")
    (change,) = group_changes({"g6e-mid": before}, {"g6e-mid": after}, l2_endpoints=["chat"])
    assert change.changes[0].startswith("instance type ml.g6e.12xlarge -> ml.g6e.24xlarge: every node is replaced")
    assert "not documented" in change.changes[0]
    pods = "\n".join(change.pods)
    assert "up to 2 of 2 engine pod(s) of chat" in pods
    assert "2 of 2 Curvine worker(s) stop" in pods and "the L2 of chat goes cold (every block)" in pods
    assert "up to 1 of 1 Curvine master(s) stop: the Raft group has no quorum, so the L2 is down" in pods


def test_gpu_pods_the_remaining_nodes_cannot_hold_are_pending_until_the_workloads_stack():
    # Three engines of four GPUs on three nodes of four; two nodes left.
    before = mid(3, masters=1, engines=3)
    before = GroupRecord(
        **{**before.__dict__, "placed": [placed(ENGINE, "gpu_bound", 3, 4, spread_evenly=True, engines_of="chat")]}
    )
    after = GroupRecord(**{**before.__dict__, "count": 2})
    (change,) = group_changes({"g6e-mid": before}, {"g6e-mid": after})
    (line,) = change.unplaceable
    assert line == (
        f"the GPU pods running now ({ENGINE} 3 x 4) cannot all be placed on 2 x ml.g6e.12xlarge (4 GPUs each): some "
        "stay Pending until the workloads stack is deployed"
    )


def test_kvtiers_diff_prints_the_pods_of_a_scale_down_and_counts_them_in_the_summary(tmp_path):
    before = assembly(tmp_path / "a", [engine("img:1")])
    after = assembly(tmp_path / "b", [engine("img:1")])
    write_placement_record(before, {"g6e-mid": mid(3)})
    write_placement_record(after, {"g6e-mid": mid(2, masters=1)})
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    summary = result.output.splitlines()[2]
    assert "1 HyperPod node(s) terminate or are replaced: up to 1 engine pod(s) and 1 Curvine worker(s)" in summary
    assert "| g6e-mid | 3 -> 2 nodes: 1 node(s) terminate; their pods reschedule" in result.output
    assert "up to 1 of 3 engine pod(s) of chat" in result.output


runner = CliRunner()


def system_templates(instance_type: str, version: str, routing: str = "kvaware", replicas: int = 1) -> dict:
    """A platform stack with an EKS cluster, its system node group (no Version) and CoreDNS pinned there, and a
    workloads stack with a router required off the HyperPod nodes and an engine on them."""
    off_hyperpod = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "sagemaker.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hyperpod"]}
                        ]
                    }
                ]
            }
        }
    }
    labels = {"app.kubernetes.io/component": "router"}
    router = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-router", "namespace": "serving", "labels": labels},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "affinity": off_hyperpod,
                    "containers": [{"name": "router", "args": ["--port", "8000", "--routing-logic", routing]}],
                },
            },
        },
    }
    manifest = {
        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
        "Properties": {"ServiceToken": "t", "Manifest": json.dumps([router, engine("img:1")])},
    }
    coredns = '{"affinity":{"nodeAffinity":{"key":"kvtiers.io/role"}}}'
    platform = {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Version": version}},
        "System": {
            "Type": "AWS::EKS::Nodegroup",
            "Properties": {"InstanceTypes": [instance_type], "Labels": {"kvtiers.io/role": "system"}},
        },
        "Coredns": {"Type": "AWS::EKS::Addon", "Properties": {"AddonName": "coredns", "ConfigurationValues": coredns}},
    }
    return {"env-platform": {"Resources": platform}, "env-workloads": {"Resources": {"Endpoint": manifest}}}


def test_a_system_node_group_instance_type_change_replaces_it_and_restarts_the_router_and_its_index():
    before, after = system_templates("m7i.xlarge", "1.34"), system_templates("m7i.2xlarge", "1.34")
    (replaced,) = nodegroup_replacements(resource_changes(before, after), before)
    lines = replaced.lines()
    assert "System (AWS::EKS::Nodegroup) is replaced" in lines[0] and "/properties/InstanceTypes" in lines[0]
    assert "after 5 minutes" in lines[0]
    assert lines[1] == (
        "Deployment.apps serving/chat-router (1 pod(s)) restarts: router (kvaware), its KV index (which engine holds "
        "which prefix) is lost; with one replica the endpoint has no router until the new pod is ready"
    )
    assert lines[2] == "add-on coredns (pinned to the group) restarts"
    assert all("chat-engine" not in line for line in lines)


def test_a_system_node_group_label_change_is_in_place_and_restarts_nothing():
    before, after = system_templates("m7i.xlarge", "1.34"), system_templates("m7i.xlarge", "1.34")
    after["env-platform"]["Resources"]["System"]["Properties"]["Labels"]["team"] = "a"
    assert nodegroup_replacements(resource_changes(before, after), before) == ()


def test_a_kubernetes_version_change_upgrades_the_control_plane_only():
    before, after = system_templates("m7i.xlarge", "1.33"), system_templates("m7i.xlarge", "1.34")
    assert nodegroup_replacements(resource_changes(before, after), before) == ()
    (line,) = version_changes(before, after)
    assert line.startswith("Cluster: Kubernetes 1.33 -> 1.34 upgrades the control plane in place")
    assert "node group(s) System have no Version" in line and "UpdateClusterSoftware" in line
    assert "no node is replaced and no pod restarts" in line


def test_a_placement_record_of_an_older_kvtiers_still_loads_without_pods(tmp_path):
    """`kvtiers diff --base` synthesizes the base with its own kvtiers, whose record has no placed workloads."""
    from kvtiers.change.record import PLACEMENT_FILE, read_placement_record

    old = {"instance_type": "ml.g6e.12xlarge", "count": 3, "threads_per_core": 2, "fullest": {}, "workloads": [WORKER]}
    (tmp_path / PLACEMENT_FILE).write_text(json.dumps({"g6e-mid": old}))
    group = read_placement_record(tmp_path)["g6e-mid"]
    assert (group.placed, group.gpus_per_node) == ([], 0)
    (change,) = group_changes({"g6e-mid": group}, {"g6e-mid": mid(2, masters=1)})
    assert change.nodes_lost == 1 and change.pods == ()
