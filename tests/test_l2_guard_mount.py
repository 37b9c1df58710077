"""The L2 guard's mount check: an engine whose L2 directory shows another path than it is mounted as (a ``subPath``
bind showing the claim's root after a FUSE restart) treats the L2 as absent, and uses it again once it is right.

The mount table is the kernel's own where this machine lets a test make a mount namespace (``unshare -m``): bind
mounts made as the kubelet makes a ``subPath`` mount, then read back from ``/proc/self/mountinfo`` inside it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kvtiers.k8s_charts import kvtiers_l2_guard as guard
from tests.conftest import ROOT


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self) -> None:
        self.count += 1


class Metrics:
    def __init__(self) -> None:
        self.wrong_mounts = Counter()
        self.breaker_trips = Counter()


def kernel_mountinfo(tmp_path: Path, source: str) -> tuple[str, str]:
    """Bind ``<claim>/<source>`` onto ``<volume>/endpoint-a/qwen-1234`` in a new mount namespace; that directory and
    the mount table as the kernel shows it there."""
    claim = tmp_path / "claim"
    (claim / "endpoint-a" / "qwen-1234").mkdir(parents=True)
    target = tmp_path / "volume" / "endpoint-a" / "qwen-1234"
    target.mkdir(parents=True)
    script = f"mount --bind {claim / source} {target} && cat /proc/self/mountinfo"
    shown = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    if shutil.which("unshare") is None or shown.returncode != 0:
        pytest.skip(f"no mount namespace here: {shown.stderr.strip()[:200]}")
    return str(target), shown.stdout


def test_a_subpath_mount_of_the_endpoints_directory_passes_and_of_the_claims_root_fails(tmp_path):
    right_dir, right = kernel_mountinfo(tmp_path / "right", "endpoint-a/qwen-1234")
    wrong_dir, wrong = kernel_mountinfo(tmp_path / "wrong", ".")
    assert guard.path_in_file_system(right_dir, right).endswith("/claim/endpoint-a/qwen-1234")
    metrics = Metrics()
    assert guard.MountCheck(right_dir, metrics, read_mountinfo=lambda: right).ok
    assert not guard.MountCheck(wrong_dir, metrics, read_mountinfo=lambda: wrong).ok
    assert metrics.wrong_mounts.count == 1


def test_escaped_paths_and_stacked_mounts_are_read_as_the_kernel_writes_them():
    lines = (
        "20 1 0:20 / / rw - overlay overlay rw",
        "30 20 0:30 /pvc-1/endpoint-a/qwen\\0401 /mnt/l2/endpoint-a/qwen\\0401 rw - fuse curvine rw",
        "31 30 0:30 /pvc-1 /mnt/l2/endpoint-a/qwen\\0401 rw - fuse curvine rw",
    )
    mountinfo = "\n".join(lines)
    # the last mount at a point is the one on top
    assert guard.path_in_file_system("/mnt/l2/endpoint-a/qwen 1", mountinfo) == "/pvc-1"
    assert guard.path_in_file_system("/mnt/l2/endpoint-a/qwen 1", mountinfo.rsplit("\n", 1)[0]) == (
        "/pvc-1/endpoint-a/qwen 1"
    )
    assert guard.path_in_file_system("/data/x", "20 1 0:20 / / rw - overlay overlay rw") == "/data/x"


def test_the_l2_counts_absent_while_the_mount_is_wrong_and_returns_when_it_is_right():
    now = [0.0]
    table = {"text": "30 1 0:30 /pvc-1 /mnt/l2/endpoint-a/qwen rw - fuse curvine rw"}
    metrics = Metrics()
    check = guard.MountCheck(
        "/mnt/l2/endpoint-a/qwen/", metrics, clock=lambda: now[0], read_mountinfo=lambda: table["text"]
    )
    breaker = guard.Breaker(30.0, metrics, clock=lambda: now[0], mount=check)
    assert breaker.open and metrics.breaker_trips.count == 0
    table["text"] = "30 1 0:30 /pvc-1/endpoint-a/qwen /mnt/l2/endpoint-a/qwen rw - fuse curvine rw"
    assert breaker.open, "re-read only after the interval"
    now[0] += guard.MOUNT_CHECK_SECONDS
    assert not breaker.open
    table["text"] = ""  # the mount is gone: nothing covers the directory
    now[0] += guard.MOUNT_CHECK_SECONDS
    assert breaker.open and metrics.wrong_mounts.count == 2


def test_the_guard_in_the_engine_image_derives_the_directory_from_lmcaches_remote_url(tmp_path):
    """In the engine venv (LMCache 0.3.11): the module the ConfigMap ships imports and checks the URL's path."""
    python = ROOT / ".venv-engine" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-engine (make test builds it)")
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import kvtiers_l2_guard as g;"
        "print(json.dumps(g.path_in_file_system('/mnt/l2/endpoint-a/q', '1 0 0:1 /pvc/endpoint-a/q /mnt/l2/endpoint-a/q rw - fuse x rw')))"
    )
    out = subprocess.run(
        [str(python), "-c", code, str(Path(guard.__file__).parent)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == "/pvc/endpoint-a/q"
