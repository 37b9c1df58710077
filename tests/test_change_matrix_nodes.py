"""Node changes in real synths of both example environments, as `kvtiers diff` reports them: a scale-down of prod's
Curvine worker group (an engine, a Curvine worker and its L2 blocks, a master), one below the Curvine masters
(refused at synth), an instance type change on dev (every node, the whole L2, the only master) and a new instance
type for prod's system node group (a replacement: every router restarts, the kvaware router's index is lost)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvtiers.change.cloudformation import CfnAction
from kvtiers.change.report import EnvironmentChange, assembly_change
from kvtiers.cli.main import app
from tests.change_variants import shipped_file
from tests.conftest import CONFIG_DIR
from tests.synth import refused_by_app


def _group(raw: dict, name: str) -> dict:
    return next(g for g in raw["hyperpod"]["instance_groups"] if g["name"] == name)


def _environment(folder: Path, env: str, change: Callable[[dict], None]) -> Path:
    raw = yaml.safe_load((CONFIG_DIR / f"{env}.yaml").read_text())
    change(raw)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "env.yaml").write_text(yaml.safe_dump(raw))
    return folder / "env.yaml"


def _mid_four(raw: dict) -> None:
    _group(raw, "g6e-mid")["count"] = 4


def _larger_dev_nodes(raw: dict) -> None:
    _group(raw, "g6e-serving")["instance_type"] = "ml.g6e.24xlarge"


def _larger_system_nodes(raw: dict) -> None:
    raw["eks"]["system_nodegroup"]["instance_type"] = "m7i.4xlarge"


PAIRS: dict[str, tuple[str, Callable[[dict], None], Callable[[dict], None]]] = {
    # prod with a fourth g6e-mid node, then prod as shipped: one node of the Curvine worker group goes.
    "scale-down": ("prod", _mid_four, shipped_file),
    "instance-type": ("dev", shipped_file, _larger_dev_nodes),
    "system-nodes": ("prod", shipped_file, _larger_system_nodes),
}


@pytest.fixture(scope="module")
def assemblies(environment_assemblies) -> dict[str, tuple[Path, Path]]:
    """Each pair's two cloud assemblies."""
    return {
        name: (environment_assemblies.edited(env, before), environment_assemblies.edited(env, after))
        for name, (env, before, after) in PAIRS.items()
    }


@pytest.fixture(scope="module")
def changes(assemblies) -> dict[str, EnvironmentChange]:
    return {name: assembly_change(name, *folders) for name, folders in assemblies.items()}


def test_a_scale_down_of_the_worker_group_stops_an_engine_a_worker_and_a_master_at_worst(changes):
    change = changes["scale-down"]
    assert change.errors == ()
    (group,) = change.groups
    assert group.name == "g6e-mid" and group.nodes_lost == 1
    pods = "\n".join(group.pods)
    # qwen25-32b: 3 engines spread over 4 nodes, at most one on the node that goes.
    assert "up to 1 of 3 engine pod(s) of qwen25-32b (Deployment serving/qwen25-32b-engine) stop" in pods
    assert "1 of 4 Curvine worker(s) stop" in pods
    assert "the L2 of llama31-70b, qwen2-7b-chat, qwen25-32b goes partly cold (up to 1/4 of its blocks)" in pods
    assert "up to 1 of 3 Curvine master(s) stop: the other 2 keep the Raft quorum" in pods
    assert group.unplaceable == ()
    assert "1 HyperPod node(s) terminate or are replaced: up to 1 engine pod(s) and 1 Curvine worker(s)" in (
        change.summary()
    )


def test_kvtiers_diff_prints_the_scale_down_with_no_error(assemblies):
    before, after = assemblies["scale-down"]
    result = CliRunner().invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "**kvtiers diff**: no errors in 1 environment(s)"
    assert "| g6e-mid | 4 -> 3 nodes: 1 node(s) terminate; their pods reschedule on the others" in result.output
    assert "L0/L1 caches are lost" in result.output and "Curvine worker(s) stop" in result.output


def test_a_scale_down_below_the_curvine_masters_is_refused_by_the_app(tmp_path):
    path = _environment(tmp_path, "prod", lambda raw: _group(raw, "g6e-mid").update(count=2))
    message = refused_by_app(path)
    assert message.startswith(f"{path}: CurvineL2: masters 3 need 3 nodes in worker_groups")
    assert "they have 2: g6e-mid (2)" in message


def test_an_instance_type_change_replaces_every_node_and_with_it_the_whole_l2_and_the_only_master(changes):
    change = changes["instance-type"]
    (group,) = change.groups
    assert group.changes[0].startswith("instance type ml.g6e.12xlarge -> ml.g6e.24xlarge: every node is replaced")
    assert group.nodes_lost == 2 and group.engine_pods_lost == 2
    pods = "\n".join(group.pods)
    assert "up to 2 of 2 engine pod(s) of qwen2-7b" in pods
    assert "2 of 2 Curvine worker(s) stop" in pods and "the L2 of qwen2-7b goes cold (every block)" in pods
    assert "up to 1 of 1 Curvine master(s) stop: the Raft group has no quorum, so the L2 is down" in pods
    hyperpod = next(c for c in change.resources if c.type == "AWS::SageMaker::Cluster")
    assert hyperpod.action is CfnAction.UPDATE


def test_a_new_system_node_group_instance_type_replaces_it_and_restarts_every_router(changes):
    change = changes["system-nodes"]
    (replaced,) = change.system_nodes
    lines = replaced.lines()
    assert "EksClusterNodegroupSystem" in lines[0] and "is replaced (/properties/InstanceTypes" in lines[0]
    text = "\n".join(lines)
    assert "Deployment.apps serving/llama31-70b-router" in text
    assert "router (kvaware), its KV index (which engine holds which prefix) is lost" in text
    assert "Deployment.apps serving/qwen25-32b-router" in text and "router (session)" in text
    assert "Deployment.apps curvine/curvine-csi-controller" in text
    assert "add-on coredns (pinned to the group) restarts" in text
    assert "engine" not in text.replace("which engine holds", "")
    assert "node group EksClusterNodegroupSystem" in change.summary()
    assert change.groups == ()
