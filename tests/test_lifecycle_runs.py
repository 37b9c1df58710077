"""The lifecycle script over a node's life, in a fake root (tests/fake_node.py): its first boot, a reboot (nodeadm
rewriting the kubeconfig and restarting containerd and the kubelet), a re-run after UpdateClusterSoftware replaced the
root volume (the instance group's volume keeps its files), a re-run on the same root, and both orders with nodeadm
when nodeadm has already started the kubelet and its pods."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.fake_node import (
    DATA_ROOT,
    DISK,
    KUBECONFIG,
    SCRIPT,
    boot_blocking_mounts,
    bound,
    journal,
    kubelet_runs_pods,
    make_node,
    mounted,
    node_path,
    nodeadm,
    nodeadm_config,
    power_off,
    reboot,
    replace_root_volume,
    run,
    start_service,
    unit_values,
    volume_appears,
)
from tests.waiting import HANG_BOUND_SECONDS, until


@pytest.fixture
def node(tmp_path):
    node = make_node(tmp_path)
    yield node
    power_off(node)


def first_boot(node) -> None:
    """The lifecycle script before nodeadm, then nodeadm, which starts containerd and the kubelet; images and pods
    land on the volume."""
    root, *_ = node
    nodeadm_config(node, "kubeconfig of the first boot")
    mounted(node)
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    nodeadm(node)
    assert start_service(node, "kubelet")
    data_root = root / DATA_ROOT.lstrip("/")
    (data_root / "io.containerd.metadata.v1.bolt").mkdir(parents=True, exist_ok=True)
    (data_root / "io.containerd.metadata.v1.bolt" / "meta.db").write_text("images of the old AMI's node")
    (data_root / "snapshots" / "1" / "fs").mkdir(parents=True)
    (data_root / "snapshots" / "1" / "fs" / "old-image-file").write_text("old")
    kubelet = root / DISK.lstrip("/") / "kubelet"
    (kubelet / "pods" / "old-pod-uid" / "volumes").mkdir(parents=True)
    (kubelet / "cpu_manager_state").write_text('{"policyName":"static","defaultCpuSet":"0-3"}')


def fstab_lines(root) -> list[str]:
    fstab = root / "etc" / "fstab"
    return [line for line in fstab.read_text().splitlines() if line.strip()] if fstab.exists() else []


@pytest.mark.parametrize("volume_after_sleeps", [0, 2, 13 * 12], ids=["at_boot", "late", "after_13_minutes"])
def test_a_reboot_never_blocks_boot_and_the_kubelet_starts_only_on_the_volume(node, tmp_path, volume_after_sleeps):
    root, _, calls, _ = node
    first_boot(node)
    # HyperPod mounts /opt/sagemaker itself, not from this fstab, and the scripts wait for it: after a reboot it may
    # be mounted after local-fs.target, or much later.
    assert boot_blocking_mounts(root, tmp_path / "generated") == []
    boot = reboot(node, volume_after_sleeps=volume_after_sleeps)
    assert boot.finish() == {"containerd": "active", "kubelet": "active"}
    assert bound(node, "/var/lib/kubelet")
    log = calls.read_text().splitlines()
    started_at = max(i for i, line in enumerate(log) if line == "started kubelet")
    binds = [i for i, line in enumerate(log) if line.startswith("mount --bind") and line.endswith("/var/lib/kubelet")]
    assert binds and binds[-1] < started_at
    if volume_after_sleeps:
        assert log.index("volume mounted") < binds[-1]


def test_a_volume_that_never_comes_during_boot_holds_containerd_and_the_kubelet_and_says_so_every_minute(node):
    # nodeadm-run restarts containerd and polls until it is active, without limit; nothing would start a containerd
    # whose required unit gave up, so the unit must not give up: the node starts as soon as the volume comes.
    root, *_ = node
    first_boot(node)
    boot = reboot(node, volume_after_sleeps=None)
    waiting = f"{DISK} is not mounted yet (60s)"
    provision_log = root / "var" / "log" / "provision" / "kvtiers-node-volume.log"

    def logged_in_both() -> bool:  # the journal line comes first, the provision log's right after it
        return waiting in journal(node).read_text() and provision_log.is_file() and waiting in provision_log.read_text()

    until(lambda: logged_in_both() or not boot.running(), what="a minute of waiting, logged")
    assert boot.outcome == {"containerd": "restarting"}
    assert logged_in_both()
    mounted(node)
    assert boot.finish() == {"containerd": "active", "kubelet": "active"}
    assert bound(node, "/var/lib/kubelet")


def test_after_a_reboot_the_kubelet_reads_the_kubeconfig_nodeadm_wrote_on_this_boot(node):
    # nodeadm-config writes it on every boot, before cloud-init, onto the root disk: the volume is bound later.
    first_boot(node)
    boot = reboot(node, volume_after_sleeps=0, kubeconfig="kubeconfig of the second boot")
    assert boot.finish() == {"containerd": "active", "kubelet": "active"}
    assert node_path(node, KUBECONFIG).read_text() == "kubeconfig of the second boot"


def test_a_rerun_after_the_root_volume_is_replaced_starts_from_the_new_root_only(node, tmp_path):
    root, *_ = node
    first_boot(node)
    replace_root_volume(node)
    mounted(node)
    ami = root / "var" / "lib" / "containerd"
    (ami / "io.containerd.metadata.v1.bolt").mkdir(parents=True)
    (ami / "io.containerd.metadata.v1.bolt" / "meta.db").write_text("the new AMI's images")
    (ami / "snapshots" / "1" / "fs").mkdir(parents=True)
    (ami / "snapshots" / "1" / "fs" / "pause-image-file").write_text("new")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    data_root = root / DATA_ROOT.lstrip("/")
    assert sorted(p.relative_to(data_root) for p in data_root.rglob("*")) == sorted(
        p.relative_to(ami) for p in ami.rglob("*")
    )
    assert (data_root / "io.containerd.metadata.v1.bolt" / "meta.db").read_text() == "the new AMI's images"
    kubelet = root / DISK.lstrip("/") / "kubelet"
    assert not (kubelet / "pods" / "old-pod-uid").exists()
    assert not (kubelet / "cpu_manager_state").exists()
    assert (kubelet / "pki" / "kubelet.crt").read_text() == "cert"
    assert boot_blocking_mounts(root, tmp_path / "generated") == []
    assert len(fstab_lines(root)) == len(set(fstab_lines(root)))


def test_a_rerun_on_the_same_root_stops_nothing_and_keeps_the_running_state(node):
    # AWS: lifecycle scripts can also be run directly on the instances.
    root, _, calls, running = node
    first_boot(node)
    kubelet = root / DISK.lstrip("/") / "kubelet"
    before = sorted(p.relative_to(root) for p in (root / "opt").rglob("*"))
    fstab_before = fstab_lines(root)
    calls.write_text("")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    log = calls.read_text().splitlines()
    assert not [line for line in log if line.startswith(("systemctl stop", "mount "))]
    assert set(running.read_text().split()) == {"containerd", "kubelet"}
    assert sorted(p.relative_to(root) for p in (root / "opt").rglob("*")) == before
    assert (kubelet / "pods" / "old-pod-uid").is_dir()
    assert fstab_lines(root) == fstab_before and len(fstab_before) == len(set(fstab_before))


def test_a_rerun_on_the_same_root_after_a_boot_without_the_volume_keeps_the_volumes_images_and_pods(node):
    # The volume unit did not bind /var/lib/kubelet on this boot (stopped while it waited, or an earlier kvtiers' unit
    # gave up); the volume is mounted later and the script is run by hand.
    root, _, calls, _ = node
    first_boot(node)
    boot = reboot(node, volume_after_sleeps=None)
    until(
        lambda: f"{DISK} is not mounted yet" in journal(node).read_text() or not boot.running(), what="the unit waits"
    )
    boot.stop_volume_unit()
    assert boot.finish() == {"containerd": "stuck"}
    mounted(node)
    calls.write_text("")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    data_root = root / DATA_ROOT.lstrip("/")
    assert (data_root / "snapshots" / "1" / "fs" / "old-image-file").read_text() == "old"
    assert (data_root / "io.containerd.metadata.v1.bolt" / "meta.db").read_text() == "images of the old AMI's node"
    assert (root / DISK.lstrip("/") / "kubelet" / "pods" / "old-pod-uid" / "volumes").is_dir()
    assert bound(node, "/var/lib/kubelet")
    assert not [line for line in calls.read_text().splitlines() if line.startswith("systemctl stop")]


def test_a_kubelet_directory_another_tool_mounted_on_a_new_root_is_not_moved(node):
    # The EKS AMI's setup-local-disks (nodeadm's local storage) binds /var/lib/kubelet onto the instance stores.
    root, _, calls, _ = node
    mounted(node)
    (root.parent / "mounts").write_text(f"{root}/var/lib/kubelet\n")
    result = run(node)
    assert result.returncode == 1
    assert "a mount that this script did not make" in result.stdout
    assert not [line for line in calls.read_text().splitlines() if line.startswith(("systemctl stop", "mount "))]
    assert not (root / DISK.lstrip("/") / "kubelet").exists()


def test_a_node_set_up_by_an_earlier_kvtiers_loses_its_boot_blocking_fstab_line_on_a_rerun(node, tmp_path):
    root, *_ = node
    first_boot(node)
    (root / "etc" / "fstab").write_text(
        "UUID=0a1b / xfs defaults,noatime 1 1\n"
        "/opt/sagemaker/kubelet /var/lib/kubelet none bind,x-systemd.requires-mounts-for=/opt/sagemaker 0 0\n"
    )
    assert run(node).returncode == 0
    assert fstab_lines(root) == ["UUID=0a1b / xfs defaults,noatime 1 1"]


def test_a_rerun_on_a_root_an_earlier_kvtiers_moved_with_fstab_moves_nothing_even_unbound(node):
    # Those versions installed no unit: the fstab line alone says the volume holds this root's images and pods.
    root, _, _, running = node
    first_boot(node)
    systemd = root / "etc" / "systemd" / "system"
    (systemd / "kvtiers-node-volume.service").unlink()
    for dropin in systemd.glob("*.service.d/90-kvtiers-node-volume.conf"):
        dropin.unlink()
    (root / "etc" / "fstab").write_text(
        "/opt/sagemaker/kubelet /var/lib/kubelet none bind,x-systemd.requires-mounts-for=/opt/sagemaker 0 0\n"
    )
    (root.parent / "mounts").write_text("")  # not bound, say from an emergency shell
    (root.parent / "binds").write_text("")
    running.write_text("")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / DATA_ROOT.lstrip("/") / "snapshots" / "1" / "fs" / "old-image-file").read_text() == "old"
    assert (root / DISK.lstrip("/") / "kubelet" / "pods" / "old-pod-uid").is_dir()
    assert fstab_lines(root) == [] and (systemd / "kvtiers-node-volume.service").is_file()
    assert bound(node, "/var/lib/kubelet")


def test_after_nodeadm_a_kubelet_running_pods_is_not_stopped_and_the_node_fails_loudly(node):
    # Stopping it and binding a copy over /var/lib/kubelet would leave the running device plugins watching the old
    # directory: the node would advertise no GPUs until they restart.
    root, _, calls, running = node
    mounted(node)
    nodeadm(node)
    kubelet_runs_pods(node)
    result = run(node)
    assert result.returncode == 1
    log = calls.read_text().splitlines()
    assert not [line for line in log if line.startswith(("systemctl stop", "mount "))]
    assert set(running.read_text().split()) == {"containerd", "kubelet"}
    assert (root / "var" / "lib" / "kubelet" / "pods" / "0b5e-device-plugin").is_dir()
    assert "kubelet already runs pods" in result.stdout and "on_create failed" in result.stdout


def test_before_nodeadm_the_kubelet_nodeadm_starts_waits_for_the_volume_and_runs_on_it(node):
    root, _, calls, running = node
    mounted(node)
    assert run(node).returncode == 0
    assert "kubelet" not in running.read_text().split()  # the script leaves starting it to nodeadm
    nodeadm(node)
    (root / "opt" / "sagemaker" / ".mounted").unlink()  # not yet mounted when nodeadm starts the kubelet
    volume_appears(node, after_sleeps=1)
    assert start_service(node, "kubelet")
    log = calls.read_text().splitlines()
    assert log.index("volume mounted") < log.index("started kubelet")
    assert bound(node, "/var/lib/kubelet")


def test_a_crash_looping_kubelet_with_pods_counts_as_running(node):
    # Between two restarts (Restart=on-failure) systemd reports the kubelet "activating", not "active".
    _, _, calls, running = node
    mounted(node)
    nodeadm(node)
    kubelet_runs_pods(node)
    running.write_text("containerd\nkubelet activating\n")
    result = run(node)
    assert result.returncode == 1
    assert "kubelet already runs pods" in result.stdout
    assert not [line for line in calls.read_text().splitlines() if line.startswith(("systemctl stop", "mount "))]


def test_a_root_without_a_kubelet_directory_gets_one_bound_onto_the_volume(node):
    root, *_ = node
    mounted(node)
    shutil.rmtree(root / "var" / "lib" / "kubelet")
    result = run(node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "var" / "lib" / "kubelet").is_dir() and bound(node, "/var/lib/kubelet")


def test_a_team_that_sets_disk_to_another_volume_gets_its_boots_waiting_for_and_binding_that_one(node, tmp_path):
    root, *_ = node
    other = "/opt/dlami/nvme"
    script = tmp_path / "on_create.sh"
    text = SCRIPT.read_text()
    assert f"DISK={DISK}\n" in text
    script.write_text(text.replace(f"DISK={DISK}\n", f"DISK={other}\n"))
    mounted(node, other)
    result = run(node, script=script)
    assert result.returncode == 0, result.stdout + result.stderr
    boot = reboot(node, volume_after_sleeps=1, disk=other)
    assert boot.finish() == {"containerd": "active", "kubelet": "active"}
    assert node_path(node, "/var/lib/kubelet") == root / other.lstrip("/") / "kubelet"


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_systemd_accepts_the_unit_and_the_drop_ins_it_reads_at_boot(node):
    root, *_ = node
    mounted(node)
    assert run(node).returncode == 0
    shutil.copytree("/lib/systemd/system", root / "lib" / "systemd" / "system", symlinks=True)
    for service in ("containerd", "kubelet"):  # the AMI's units, reduced to what verify reads
        binary = root / "usr" / "bin" / service
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
        (root / "lib" / "systemd" / "system" / f"{service}.service").write_text(
            f"[Unit]\nDescription={service}\n[Service]\nExecStart=/usr/bin/{service}\n"
        )
    dropins = root / "etc" / "systemd" / "system"
    required = sorted(
        {
            unit
            for dropin in dropins.glob("*.service.d/*.conf")
            for value in unit_values(dropin.read_text(), "Unit", "Requires")
            for unit in value.split()
        }
    )
    assert required  # containerd and the kubelet wait for something: the volume
    result = subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", "containerd.service", "kubelet.service", *required],
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_SECONDS,
    )
    assert (result.returncode, result.stderr) == (0, "")
