"""The Curvine worker's NVMe check (issue: a first `cdk deploy` that works, point 6): the rendered DaemonSet runs
it before the worker, and the script itself, run here with bash, accepts only a mount of the instance store.

The fake node is a mount table and a sysfs tree in the shapes the kernel gives them (``/proc/self/mountinfo``:
ID, parent, major:minor, root, mount point, options, ``-``, type, source; ``/sys/dev/block/<maj:min>`` links to
the device, ``slaves/`` lists a device-mapper volume's members, ``device/model`` names the disk; NVMe instance
stores report "Amazon EC2 NVMe Instance Storage", EBS volumes "Amazon Elastic Block Store").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvtiers.k8s_charts.curvine_l2.charts import NVME_CHECK_SCRIPT, NVME_CHECK_TARGET
from kvtiers.k8s_charts.curvine_l2.props import DATA_MOUNT

INSTANCE_STORE = "Amazon EC2 NVMe Instance Storage        "
EBS = "Amazon Elastic Block Store              "


class FakeNode:
    def __init__(self, root: Path) -> None:
        self.sys = root / "sys"
        self.mountinfo = root / "mountinfo"
        self.lines = ["1 0 259:2 / / rw - xfs /dev/nvme0n1p1 rw"]
        self.disk("nvme0n1", "259:0", EBS)
        self.partition("nvme0n1", "nvme0n1p1", "259:2")

    def _link(self, where: Path, target: Path) -> None:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(os.path.relpath(target, where.parent))

    def disk(self, name: str, devno: str, model: str) -> None:
        device = self.sys / "devices" / name
        (device / "device").mkdir(parents=True)
        (device / "device" / "model").write_text(model + "\n")
        self._link(self.sys / "class" / "block" / name, device)
        self._link(self.sys / "dev" / "block" / devno, device)

    def partition(self, disk: str, name: str, devno: str) -> None:
        device = self.sys / "devices" / disk / name
        device.mkdir(parents=True)
        (device / "partition").write_text("1\n")
        self._link(self.sys / "class" / "block" / name, device)
        self._link(self.sys / "dev" / "block" / devno, device)

    def lvm(self, name: str, devno: str, members: list[str]) -> None:
        device = self.sys / "devices" / "virtual" / name
        (device / "slaves").mkdir(parents=True)
        for member in members:
            self._link(device / "slaves" / member, self.sys / "devices" / member)
        self._link(self.sys / "class" / "block" / name, device)
        self._link(self.sys / "dev" / "block" / devno, device)

    def mount(self, devno: str, root: str, source: str) -> None:
        self.lines.append(f"2 1 {devno} {root} {NVME_CHECK_TARGET} ro,relatime - xfs {source} rw")

    def check(self) -> subprocess.CompletedProcess:
        self.mountinfo.write_text("\n".join(self.lines) + "\n")
        env = {
            "TARGET": NVME_CHECK_TARGET,
            "HOST_PATH": "/opt/dlami/nvme",
            "MOUNTINFO": str(self.mountinfo),
            "SYSFS": str(self.sys),
            "PATH": "/usr/bin:/bin",
        }
        return subprocess.run(["bash", "-c", NVME_CHECK_SCRIPT], env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture
def node(tmp_path) -> FakeNode:
    return FakeNode(tmp_path)


def test_instance_store_mount_passes(node):
    node.disk("nvme1n1", "259:1", INSTANCE_STORE)
    node.mount("259:1", "/", "/dev/nvme1n1")
    result = node.check()
    assert result.returncode == 0, result.stderr
    assert "backed by nvme1n1 (Amazon EC2 NVMe Instance Storage)" in result.stdout


def test_plain_directory_on_the_root_disk_fails(node):
    node.mount("259:2", "/opt/dlami/nvme", "/dev/nvme0n1p1")
    result = node.check()
    assert result.returncode == 1
    assert "/opt/dlami/nvme is not a mount point" in result.stderr and "/dev/nvme0n1p1" in result.stderr


def test_an_ebs_volume_mounted_there_fails(node):
    node.disk("nvme2n1", "259:3", EBS)
    node.mount("259:3", "/", "/dev/nvme2n1")
    result = node.check()
    assert result.returncode == 1 and "nvme2n1 is not the instance store" in result.stderr


def test_lvm_volume_of_instance_stores_passes(node):
    node.disk("nvme1n1", "259:1", INSTANCE_STORE)
    node.disk("nvme2n1", "259:3", INSTANCE_STORE)
    node.lvm("dm-0", "253:0", ["nvme1n1", "nvme2n1"])
    node.mount("253:0", "/", "/dev/mapper/vg.01-lv")
    result = node.check()
    assert result.returncode == 0, result.stderr
    assert "nvme1n1 (Amazon EC2 NVMe Instance Storage)" in result.stdout and "nvme2n1" in result.stdout


def test_lvm_volume_that_also_spans_an_ebs_disk_fails(node):
    node.disk("nvme1n1", "259:1", INSTANCE_STORE)
    node.disk("nvme2n1", "259:3", EBS)
    node.lvm("dm-0", "253:0", ["nvme1n1", "nvme2n1"])
    node.mount("253:0", "/", "/dev/mapper/vg.01-lv")
    result = node.check()
    assert result.returncode == 1
    assert "nvme2n1 is not the instance store" in result.stderr and "ebs_volume_gb to 0" in result.stderr


def test_lvm_volume_of_ebs_only_fails(node):
    node.disk("nvme2n1", "259:3", EBS)
    node.lvm("dm-0", "253:0", ["nvme2n1"])
    node.mount("253:0", "/", "/dev/mapper/vg.01-lv")
    assert node.check().returncode == 1


def test_missing_mount_fails(node):
    result = node.check()
    assert result.returncode == 1 and "is not mounted in this container" in result.stderr


def test_worker_runs_the_check_on_the_mount_it_uses(dev_env):
    from tests.test_curvine_l2_charts import render_env

    (daemonset,) = render_env(dev_env)["CurvineWorkerChart"]
    spec = daemonset["spec"]["template"]["spec"]
    (check,) = spec["initContainers"]
    assert check["command"] == ["/bin/bash", "-c", NVME_CHECK_SCRIPT]
    assert {"name": "HOST_PATH", "value": "/opt/dlami/nvme"} in check["env"]
    assert check["volumeMounts"] == [{"name": "nvme", "mountPath": NVME_CHECK_TARGET, "readOnly": True}]
    volume = next(v for v in spec["volumes"] if v["name"] == "nvme")
    assert volume["hostPath"] == {"path": "/opt/dlami/nvme", "type": "Directory"}
    worker = next(c for c in spec["containers"] if c["name"] == "worker")
    data = next(m for m in worker["volumeMounts"] if m["mountPath"] == DATA_MOUNT)
    assert data["name"] == "nvme" and data["subPath"] == "curvine"


def test_data_dir_outside_the_nvme_mount_is_rejected(tmp_path):
    from tests.test_config import rejected

    message = rejected(tmp_path, lambda raw: raw["curvine"]["worker"].update(data_dir="/var/curvine"))
    assert "CurvineSettings: data_dir '/var/curvine' must be below nvme_mount '/opt/dlami/nvme'" in message
