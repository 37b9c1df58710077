"""The HyperPod lifecycle script, run with bash against fake node roots. System commands are stubs on PATH that
record their calls; ``systemctl`` keeps which services run in a state file, ``mountpoint`` answers from the fake
root. The node is checked both ways round with nodeadm (the Amazon Linux 2023 EKS bootstrap, which writes
/etc/containerd/config.toml and starts containerd): the script first, then nodeadm; and nodeadm first, then the
script. Either way containerd must start with its data root on the instance group's volume."""

from __future__ import annotations

import configparser
import subprocess
import tomllib
from pathlib import Path

import pytest

from kvtiers.constructs.hyperpod_cluster import LIFECYCLE_DIR, ON_CREATE

SCRIPT = LIFECYCLE_DIR / ON_CREATE
NODEADM_CONFIG = 'version = 2\nroot = "/var/lib/containerd"\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
"""What nodeadm leaves in /etc/containerd/config.toml: the default data root."""
DATA_ROOT = "/opt/sagemaker/containerd/data-root"


@pytest.fixture
def node(tmp_path):
    return make_node(tmp_path)


def make_node(tmp_path: Path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('ID="amzn"\nVERSION_ID="2023"\nPRETTY_NAME="Amazon Linux 2023"\n')
    (root / "usr" / "bin").mkdir(parents=True)
    runtime = root / "usr" / "bin" / "nvidia-container-runtime"
    runtime.write_text("#!/bin/sh\n")
    runtime.chmod(0o755)
    (root / "var" / "lib" / "kubelet" / "pki").mkdir(parents=True)
    (root / "var" / "lib" / "kubelet" / "pki" / "kubelet.crt").write_text("cert")
    (root / "opt" / "sagemaker").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    running = tmp_path / "running"
    running.write_text("")
    for name in ("findmnt", "lsblk", "mount"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n')
        stub.chmod(0o755)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(
        f"""#!/bin/bash
echo "systemctl $*" >> {calls}
case "$1" in
  is-active) grep -qx "${{@: -1}}" {running} ;;
  stop) grep -vx "$2" {running} > {running}.new; mv {running}.new {running} ;;
  start) echo "$2" >> {running} ;;
esac
"""
    )
    systemctl.chmod(0o755)
    mountpoint = bin_dir / "mountpoint"
    mountpoint.write_text('#!/bin/bash\n[[ -e "${@: -1}/.mounted" ]]\n')
    mountpoint.chmod(0o755)
    return root, bin_dir, calls, running


def run(node, **env) -> subprocess.CompletedProcess:
    root, bin_dir, _, _ = node
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KVTIERS_ROOT": str(root),
        "KVTIERS_WAIT_SECONDS": "0",
        "KVTIERS_FAIL_PAUSE_SECONDS": "0",
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT)], env=environment, capture_output=True, text=True, timeout=60)


BASE_RUNTIME_SPEC = "/etc/containerd/base-runtime-spec.json"
"""Where nodeadm writes the node's base OCI spec (its default rlimits) before it starts containerd (awslabs/amazon-eks-ami
nodeadm/internal/containerd ``writeBaseRuntimeSpec``, unconditional); its own containerd configuration points there."""


def nodeadm(node, *, base_runtime_spec: bool = True) -> None:
    """What nodeadm does to containerd: write its configuration file and (unless an image without it is modelled)
    the base runtime spec, add its own drop-in, start containerd (with the content of /var/lib/containerd it
    creates)."""
    root, _, _, running = node
    (root / "etc" / "containerd").mkdir(parents=True, exist_ok=True)
    if base_runtime_spec:
        (root / BASE_RUNTIME_SPEC.lstrip("/")).write_text('{"ociVersion": "1.1.0", "process": {"rlimits": []}}')
    (root / "etc" / "containerd" / "config.toml").write_text(NODEADM_CONFIG)
    dropins = root / "etc" / "systemd" / "system" / "containerd.service.d"
    dropins.mkdir(parents=True, exist_ok=True)
    (dropins / "10-nodeadm.conf").write_text("[Service]\nExecStart=\nExecStart=/usr/bin/containerd\n")
    (root / "var" / "lib" / "containerd" / "io.containerd.content.v1.content").mkdir(parents=True, exist_ok=True)
    if "containerd" not in running.read_text().split():
        running.write_text(running.read_text() + "containerd\n")


def effective_containerd_config(root: Path) -> dict:
    """The configuration containerd starts with: the last ExecStart of its drop-ins in systemd's (lexical) order,
    ``--config`` or containerd's default path, read from the fake root."""
    exec_start = "/usr/bin/containerd"
    dropins = root / "etc" / "systemd" / "system" / "containerd.service.d"
    for dropin in sorted(dropins.glob("*.conf")) if dropins.is_dir() else ():
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        parser.read_string(dropin.read_text().replace("ExecStart=\n", ""))
        exec_start = parser["Service"].get("ExecStart", exec_start)
    args = exec_start.split()
    path = args[args.index("--config") + 1] if "--config" in args else "/etc/containerd/config.toml"
    return tomllib.loads((root / path.lstrip("/")).read_text())


def mounted(node) -> None:
    (node[0] / "opt" / "sagemaker" / ".mounted").write_text("")


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
    fstab = (root / "etc" / "fstab").read_text()
    assert "/opt/sagemaker/kubelet /var/lib/kubelet none bind,x-systemd.requires-mounts-for=/opt/sagemaker 0 0" in fstab
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
