"""The HyperPod lifecycle script, run with bash against a fake node root (issue: a first `cdk deploy` that works,
point 6). System commands are stubs on PATH that record their calls; ``mountpoint`` answers from the fake root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kvtiers.constructs.hyperpod_cluster import LIFECYCLE_DIR, ON_CREATE

SCRIPT = LIFECYCLE_DIR / ON_CREATE
AMI_CONFIG = 'version = 2\nroot = "/var/lib/containerd"\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "containerd").mkdir(parents=True)
    (root / "etc" / "containerd" / "config.toml").write_text(AMI_CONFIG)
    (root / "etc" / "os-release").write_text('ID="amzn"\nVERSION_ID="2023"\nPRETTY_NAME="Amazon Linux 2023"\n')
    (root / "var" / "lib" / "containerd" / "io.containerd.content.v1.content").mkdir(parents=True)
    (root / "var" / "lib" / "kubelet" / "pki").mkdir(parents=True)
    (root / "var" / "lib" / "kubelet" / "pki" / "kubelet.crt").write_text("cert")
    (root / "opt" / "sagemaker").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name in ("systemctl", "findmnt", "lsblk", "mount"):
        stub = bin_dir / name
        # systemctl: kubelet and containerd are running (is-active succeeds), as on a node that booted them already.
        stub.write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n')
        stub.chmod(0o755)
    # mountpoint: a path is mounted when the fake root has a marker file in it.
    mountpoint = bin_dir / "mountpoint"
    mountpoint.write_text('#!/bin/bash\n[[ -e "${@: -1}/.mounted" ]]\n')
    mountpoint.chmod(0o755)
    return root, bin_dir, calls


def run(node, **env) -> subprocess.CompletedProcess:
    root, bin_dir, _ = node
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KVTIERS_ROOT": str(root),
        "KVTIERS_WAIT_SECONDS": "0",
        "KVTIERS_FAIL_PAUSE_SECONDS": "0",
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT)], env=environment, capture_output=True, text=True, timeout=60)


def test_moves_containerd_and_kubelet_onto_the_secondary_volume(node):
    root, _, calls = node
    (root / "opt" / "sagemaker" / ".mounted").write_text("")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    config = (root / "opt" / "sagemaker" / "containerd" / "config.toml").read_text()
    assert 'root = "/opt/sagemaker/containerd/data-root"' in config and 'default_runtime_name = "nvidia"' in config
    drop_in = (root / "etc" / "systemd" / "system" / "containerd.service.d" / "50-kvtiers-data-root.conf").read_text()
    assert "ExecStart=\nExecStart=/usr/bin/containerd --config /opt/sagemaker/containerd/config.toml" in drop_in
    assert (root / "opt" / "sagemaker" / "containerd" / "data-root" / "io.containerd.content.v1.content").is_dir()
    assert (root / "opt" / "sagemaker" / "kubelet" / "pki" / "kubelet.crt").read_text() == "cert"
    fstab = (root / "etc" / "fstab").read_text()
    assert "/opt/sagemaker/kubelet /var/lib/kubelet none bind,x-systemd.requires-mounts-for=/opt/sagemaker 0 0" in fstab
    log = calls.read_text().splitlines()
    assert f"mount --bind {root}/opt/sagemaker/kubelet {root}/var/lib/kubelet" in log
    assert f"mount --make-rshared {root}/var/lib/kubelet" in log
    # Both services stop before their data moves and start after it, containerd first.
    order = [
        line
        for line in log
        if line.startswith(("systemctl stop", "systemctl start", "systemctl daemon-reload", "mount --bind"))
    ]
    assert order == [
        "systemctl stop kubelet",
        "systemctl stop containerd",
        "systemctl daemon-reload",
        f"mount --bind {root}/opt/sagemaker/kubelet {root}/var/lib/kubelet",
        "systemctl start containerd",
        "systemctl start kubelet",
    ]
    assert "kvtiers: on_create done" in (root / "var" / "log" / "provision" / "kvtiers-on-create.log").read_text()


def test_fails_the_node_loudly_without_the_secondary_volume(node):
    root, _, _ = node
    result = run(node)
    assert result.returncode == 1
    log = (root / "var" / "log" / "provision" / "kvtiers-on-create.log").read_text()
    assert "/opt/sagemaker is not mounted" in log and "on_create failed" in log and "pausing 0s" in log
    assert not (root / "etc" / "fstab").exists()


def test_fails_on_an_unexpected_os(node):
    root, _, _ = node
    (root / "opt" / "sagemaker" / ".mounted").write_text("")
    (root / "etc" / "os-release").write_text('ID="ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04"\n')
    result = run(node)
    assert result.returncode == 1 and "expected the Amazon Linux HyperPod EKS AMI, found Ubuntu 22.04" in result.stdout


def test_amazon_linux_2_moves_the_data_root_in_the_eks_containerd_config(node):
    root, _, _ = node
    (root / "opt" / "sagemaker" / ".mounted").write_text("")
    (root / "etc" / "os-release").write_text('ID="amzn"\nVERSION_ID="2"\nPRETTY_NAME="Amazon Linux 2"\n')
    (root / "etc" / "eks" / "containerd").mkdir(parents=True)
    (root / "etc" / "eks" / "containerd" / "containerd-config.toml").write_text(AMI_CONFIG)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    config = (root / "etc" / "eks" / "containerd" / "containerd-config.toml").read_text()
    assert 'root = "/opt/sagemaker/containerd/data-root"' in config


def test_a_missing_containerd_config_fails_with_its_path(node):
    root, _, _ = node
    (root / "opt" / "sagemaker" / ".mounted").write_text("")
    (root / "etc" / "containerd" / "config.toml").unlink()
    result = run(node)
    assert result.returncode == 1 and "/etc/containerd/config.toml is missing" in result.stdout


def test_pause_before_failing_is_a_minute_by_default():
    text = Path(SCRIPT).read_text()
    assert "FAIL_PAUSE_SECONDS=${KVTIERS_FAIL_PAUSE_SECONDS:-60}" in text
