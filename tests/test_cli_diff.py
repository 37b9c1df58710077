"""`kvtiers diff` on two hand-made cloud assemblies: Markdown with the summary first, exit 1 on an error, 0 without;
the L2 reasons from the synth's endpoint record. (The synthesizing path runs in tools/bench_diff.py and CI's change
job; the model itself in tests/test_change_model.py and tests/test_change_matrix.py.)"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from typer.testing import CliRunner

from kvtiers.change.record import (
    EndpointRecord,
    GroupRecord,
    read_endpoint_record,
    write_endpoint_record,
    write_placement_record,
)
from kvtiers.cli.main import app
from kvtiers.k8s_charts.l2 import L2Namespace

runner = CliRunner()
NAMESPACE = L2Namespace(
    weights="hf://Qwen/Qwen2-7B-Instruct",
    model="Qwen/Qwen2-7B-Instruct",
    revision="unpinned",
    dtype="bfloat16",
    kv_dtype="bfloat16",
    tensor_parallel_size=1,
    pipeline_parallel_size=1,
    chunk_size=256,
    lmcache_version="0.3.11",
    serde="naive",
    hash_seed="0",
)


def assembly(folder, objects, record: EndpointRecord | None = None):
    folder.mkdir()
    manifest = {
        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
        "Properties": {"ServiceToken": "t", "Manifest": json.dumps(objects), "PruneLabel": "p", "Overwrite": True},
    }
    for o in objects:
        o.setdefault("metadata", {}).setdefault("labels", {})["p"] = ""
    (folder / "env-workloads.template.json").write_text(json.dumps({"Resources": {"Endpoint": manifest}}))
    if record is not None:
        write_endpoint_record(folder, environment="env", endpoints={"chat": record})
    return folder


def engine(image: str, replicas: int = 2) -> dict:
    labels = {"kvtiers.io/endpoint": "chat", "app.kubernetes.io/component": "engine"}
    pod = {"containers": [{"image": image, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-engine", "namespace": "serving", "labels": labels},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def test_a_new_engine_image_restarts_the_engines_and_moves_the_l2_and_says_why(tmp_path):
    newer = replace(NAMESPACE, lmcache_version="0.3.12")
    old = EndpointRecord(
        serving="self_managed",
        engine_image="img:1",
        l2=True,
        l2_directory=NAMESPACE.directory,
        l2_namespace=asdict(NAMESPACE),
    )
    new = replace(old, engine_image="img:2", l2_directory=newer.directory, l2_namespace=asdict(newer))
    before = assembly(tmp_path / "a", [engine("img:1")], old)
    after = assembly(tmp_path / "b", [engine("img:2")], new)
    assert read_endpoint_record(after).endpoints["chat"] == new
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("**kvtiers diff**: no errors")
    assert "1 endpoint(s) with a cold L2" in lines[2]
    assert "engine image img:1 -> img:2; lmcache version 0.3.11 -> 0.3.12" in result.output
    assert "| Deployment.apps serving/chat-engine | restart | 2 -> 2 |" in result.output


def test_a_new_l2_owner_with_the_same_namespace_is_a_cold_l2_and_says_why(tmp_path):
    # l2_share_group set: the namespace fingerprint stays, the directory the pods mount moves to the group's.
    old = EndpointRecord(
        serving="self_managed",
        engine_image="img:1",
        l2=True,
        l2_directory=NAMESPACE.directory,
        l2_namespace=asdict(NAMESPACE),
        l2_location=f"curvine-l2/endpoint-chat/{NAMESPACE.directory}",
    )
    new = replace(old, l2_location=f"curvine-l2/shared-group/{NAMESPACE.directory}")
    before = assembly(tmp_path / "a", [engine("img:1")], old)
    after = assembly(tmp_path / "b", [engine("img:1")], new)
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    assert "1 endpoint(s) with a cold L2" in result.output.splitlines()[2]
    assert f"L2 location curvine-l2/endpoint-chat/{NAMESPACE.directory} -> curvine-l2/shared-group/" in result.output


def test_an_orphan_is_an_error_and_exits_1(tmp_path):
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "chat", "namespace": "serving"},
    }
    before = assembly(tmp_path / "a", [engine("img:1"), policy])
    after = assembly(tmp_path / "b", [engine("img:1", replicas=3)])
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 1
    assert "orphan: NetworkPolicy.networking.k8s.io serving/chat" in result.output


def test_before_without_after_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["diff", "--before", str(tmp_path)])
    assert result.exit_code == 2 and "both --before and --after" in result.output


def group(count: int, cpu: str, instance_type: str = "ml.g6e.12xlarge") -> GroupRecord:
    return GroupRecord(
        instance_type=instance_type,
        count=count,
        threads_per_core=2,
        fullest={"cpu": f"{cpu} of 47.81 CPU", "gpus": "4 of 4"},
        workloads=["Deployment serving/chat-engine"],
    )


def test_a_group_scaled_down_says_which_nodes_terminate_and_how_the_fullest_node_changes(tmp_path):
    before = assembly(tmp_path / "a", [engine("img:1")])
    after = assembly(tmp_path / "b", [engine("img:1")])
    write_placement_record(before, {"g6e-mid": group(3, "41.695"), "g6e-small": group(2, "6", "ml.g6e.2xlarge")})
    write_placement_record(after, {"g6e-mid": group(2, "41.695"), "g6e-small": group(2, "7", "ml.g6e.4xlarge")})
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    assert "| g6e-mid | 3 -> 2 nodes: 1 node(s) terminate; their pods reschedule" in result.output
    assert "| g6e-small | instance type ml.g6e.2xlarge -> ml.g6e.4xlarge: every node is replaced" in result.output
    assert "cpu 6 of 47.81 CPU -> 7 of 47.81 CPU" in result.output


def test_a_change_whose_pods_no_longer_fit_is_a_refused_synth_that_diff_reports(tmp_path):
    from kvtiers.cli.diff import DiffError, synth
    from tests.conftest import CONFIG_DIR, ROOT

    config = tmp_path / "prod.yaml"
    # The worker group scaled below the three Curvine masters (one to a node).
    config.write_text((CONFIG_DIR / "prod.yaml").read_text().replace("      count: 3\n", "      count: 2\n"))
    out = tmp_path / "out"
    out.mkdir()
    try:
        synth(ROOT, config, out)
    except DiffError as error:
        message = str(error)
    else:
        raise AssertionError("the synth was not refused")
    assert "CurvineL2: masters 3 need 3 nodes in worker_groups" in message and "they have 2: g6e-mid (2)" in message
