"""The guard's use stamps (``kvtiers_l2_guard.stamp_use``), run in ``.venv-engine`` (the engine's Python and
``prometheus_client``): a stamp keeps the file's modification time to the nanosecond, and a stamp the file system
refuses is counted by errno, not swallowed. Eviction by last use depends on the stamps (the janitor); a pod whose
user may not set explicit times on Curvine v0.4.1 (only root or the owner may, ``curvine_file_system.rs``) would
otherwise fall back to oldest-written-first with no signal."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import ROOT
from tests.upstream import ENGINE_VENV

STAMP = """
import errno, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import kvtiers_l2_guard as guard
from prometheus_client import REGISTRY, generate_latest

folder = sys.argv[2]
kept, refused = os.path.join(folder, "kept.data"), os.path.join(folder, "refused.data")
written_ns = 1_700_000_000_123_456_789
for path in (kept, refused):
    open(path, "wb").close()
    os.utime(path, ns=(written_ns, written_ns))
metrics = guard.GuardMetrics.get()
guard.stamp_use(kept, time.time_ns(), metrics)
real_utime = os.utime
def refuse(*args, **kwargs):
    raise PermissionError(errno.EPERM, "Operation not permitted")
os.utime = refuse
guard.stamp_use(refused, time.time_ns(), metrics)
os.utime = real_utime
stat = os.stat(kept)
series = [line for line in generate_latest(REGISTRY).decode().splitlines() if line.startswith("kvtiers_l2_use_stamp")]
print(json.dumps({"mtime_ns": stat.st_mtime_ns, "atime_ns": stat.st_atime_ns, "written_ns": written_ns,
                  "series": series}))
"""


def test_a_stamp_keeps_the_write_time_exactly_and_a_refused_one_is_counted_by_errno(tmp_path):
    run = subprocess.run(
        [str(ENGINE_VENV / "bin" / "python"), "-c", STAMP, str(ROOT / "kvtiers" / "k8s_charts"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["mtime_ns"] == got["written_ns"], "the modification time moved"
    assert got["atime_ns"] > got["written_ns"]
    assert "kvtiers_l2_use_stamps_total 1.0" in got["series"], got["series"]
    assert 'kvtiers_l2_use_stamp_failures_total{errno="EPERM"} 1.0' in got["series"], got["series"]
