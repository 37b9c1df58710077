"""The HyperPod lifecycle script, run with bash against fake node roots (tests/fake_node.py). The node is checked
both ways round with nodeadm (the Amazon Linux 2023 EKS bootstrap, which writes /etc/containerd/config.toml and starts
containerd): the script first, then nodeadm; and nodeadm first, then the script. Either way containerd must start with
its data root on the instance group's volume."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.fake_node import (
    BASE_RUNTIME_SPEC,
    DATA_ROOT,
    NODEADM_CONFIG,
    SCRIPT,
    effective_containerd_config,
    make_node,
    mounted,
    nodeadm,
    run,
)


@pytest.fixture
def node(tmp_path):
    return make_node(tmp_path)


def test_before_nodeadm_containerd_later_starts_with_its_data_root_on_the_volume(node):
    root, _, _, running = node
    mounted(node)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "containerd" not in running.read_text()  # not started by the script: it was not running
    nodeadm(node)
    config = effective_containerd_config(root)
    assert config["root"] == DATA_ROOT
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "nvidia"


def test_after_nodeadm_containerd_is_restarted_with_its_data_root_on_the_volume(node):
    root, _, calls, running = node
    mounted(node)
    nodeadm(node)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert effective_containerd_config(root)["root"] == DATA_ROOT
    assert (root / "opt" / "sagemaker" / "containerd" / "data-root" / "io.containerd.content.v1.content").is_dir()
    log = calls.read_text().splitlines()
    assert (
        log.index("systemctl stop containerd")
        < log.index("systemctl daemon-reload")
        < log.index("systemctl start containerd")
    )
    assert "containerd" in running.read_text().split()


def test_both_orders_give_the_same_containerd_configuration(tmp_path):
    script_first, nodeadm_first = make_node(tmp_path / "a"), make_node(tmp_path / "b")
    mounted(script_first)
    mounted(nodeadm_first)
    assert run(script_first).returncode == 0
    nodeadm(script_first)
    nodeadm(nodeadm_first)
    assert run(nodeadm_first).returncode == 0
    assert effective_containerd_config(script_first[0]) == effective_containerd_config(nodeadm_first[0])


def test_a_node_without_the_nvidia_runtime_defaults_to_runc(node):
    root, *_ = node
    mounted(node)
    (root / "usr" / "bin" / "nvidia-container-runtime").unlink()
    assert run(node).returncode == 0
    assert (
        effective_containerd_config(root)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
        == "runc"
    )


def test_moves_the_kubelet_directory_onto_the_volume_with_a_bind_mount(node):
    root, _, calls, _ = node
    mounted(node)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "opt" / "sagemaker" / "kubelet" / "pki" / "kubelet.crt").read_text() == "cert"
    assert not (root / "etc" / "fstab").exists()  # on later boots a unit binds it (tests/test_lifecycle_runs.py)
    log = calls.read_text().splitlines()
    assert f"mount --bind {root}/opt/sagemaker/kubelet {root}/var/lib/kubelet" in log
    assert f"mount --make-rshared {root}/var/lib/kubelet" in log
    assert "kvtiers: on_create done" in (root / "var" / "log" / "provision" / "kvtiers-on-create.log").read_text()


def test_fails_the_node_loudly_without_the_secondary_volume(node):
    root, *_ = node
    result = run(node)
    assert result.returncode == 1
    log = (root / "var" / "log" / "provision" / "kvtiers-on-create.log").read_text()
    assert "/opt/sagemaker is not mounted" in log and "on_create failed" in log and "pausing 0s" in log
    assert not (root / "etc" / "fstab").exists()


def test_fails_on_an_unexpected_os(node):
    root, *_ = node
    mounted(node)
    (root / "etc" / "os-release").write_text('ID="ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04"\n')
    result = run(node)
    assert result.returncode == 1 and "expected the Amazon Linux HyperPod EKS AMI, found Ubuntu 22.04" in result.stdout
    assert "on_create failed" in result.stdout  # the pause for the log upload, from inside a function too


def test_amazon_linux_2_moves_the_data_root_in_the_eks_containerd_config(node):
    root, *_ = node
    mounted(node)
    (root / "etc" / "os-release").write_text('ID="amzn"\nVERSION_ID="2"\nPRETTY_NAME="Amazon Linux 2"\n')
    (root / "etc" / "eks" / "containerd").mkdir(parents=True)
    (root / "etc" / "eks" / "containerd" / "containerd-config.toml").write_text(NODEADM_CONFIG)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    config = tomllib.loads((root / "etc" / "eks" / "containerd" / "containerd-config.toml").read_text())
    assert config["root"] == DATA_ROOT


def test_pause_before_failing_is_a_minute_by_default():
    text = Path(SCRIPT).read_text()
    assert "FAIL_PAUSE_SECONDS=${KVTIERS_FAIL_PAUSE_SECONDS:-60}" in text


def runtimes(root: Path) -> dict:
    return effective_containerd_config(root)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]


def test_after_nodeadm_both_runtimes_start_from_the_nodes_base_runtime_spec(node):
    # Without base_runtime_spec the containers get containerd's built-in defaults instead of the node's rlimits.
    root, *_ = node
    mounted(node)
    nodeadm(node)
    assert run(node).returncode == 0
    assert {name: r.get("base_runtime_spec") for name, r in runtimes(root).items()} == {
        "runc": BASE_RUNTIME_SPEC,
        "nvidia": BASE_RUNTIME_SPEC,
    }


def test_before_nodeadm_the_spec_nodeadm_writes_before_starting_containerd_is_used(node):
    root, *_ = node
    mounted(node)
    assert not (root / BASE_RUNTIME_SPEC.lstrip("/")).exists()
    assert run(node).returncode == 0
    nodeadm(node)
    assert all(r.get("base_runtime_spec") == BASE_RUNTIME_SPEC for r in runtimes(root).values())


def test_a_running_containerd_without_a_base_runtime_spec_is_not_pointed_at_a_missing_file(node):
    # containerd's CRI plugin fails to load a base_runtime_spec that does not exist.
    root, *_ = node
    mounted(node)
    nodeadm(node, base_runtime_spec=False)
    assert run(node).returncode == 0
    assert all("base_runtime_spec" not in r for r in runtimes(root).values())
