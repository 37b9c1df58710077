"""The L2 janitor (the Curvine L2's only working eviction at v0.4.1), run as its CronJob runs it, on a real
directory tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kvtiers.k8s_charts.curvine_l2 import l2_janitor

SCRIPT = Path(l2_janitor.__file__)


def chunk(root: Path, name: str, size: int, age: int) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (1_000_000 - age, 1_000_000 - age))
    return path


def run(root: Path, capacity: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root), str(capacity), "0.85", "0.70", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_above_the_high_watermark_the_oldest_files_go_down_to_the_low_one(tmp_path):
    old = [chunk(tmp_path, f"ns-a/old-{i}.pt", 100, age=1000 + i) for i in range(5)]
    new = [chunk(tmp_path, f"ns-b/new-{i}.pt", 100, age=i) for i in range(5)]
    result = run(tmp_path, capacity=1100)  # 1000 of 1100 bytes stored: above 85 %
    assert [p.exists() for p in old] == [True, True, False, False, False]  # oldest first, until <= 770 bytes
    assert all(p.exists() for p in new)
    assert "removed 3 files, 300 bytes" in result.stdout


def test_below_the_high_watermark_nothing_is_removed(tmp_path):
    files = [chunk(tmp_path, f"ns/f-{i}.pt", 100, age=i) for i in range(8)]
    run(tmp_path, capacity=1000)  # 80 % < 85 %
    assert all(p.exists() for p in files)


def test_directories_stay_even_when_emptied(tmp_path):
    """LMCache creates its namespace and per-pod temporary directories once, at start: they must survive."""
    chunk(tmp_path, "ns/tmp-pod-a/.keep", 0, age=5000)
    for i in range(10):
        chunk(tmp_path, f"ns/c-{i}.pt", 100, age=2000 + i)
    run(tmp_path, capacity=1000)
    assert (tmp_path / "ns" / "tmp-pod-a").is_dir() and (tmp_path / "ns").is_dir()


def test_dry_run_removes_nothing(tmp_path):
    files = [chunk(tmp_path, f"f-{i}", 100, age=i) for i in range(10)]
    result = run(tmp_path, 1000, "--dry-run")
    assert all(p.exists() for p in files) and "(dry run)" in result.stdout


def test_victims_is_oldest_first_and_stops_at_the_low_watermark():
    files = [l2_janitor.ChunkFile(f"f{i}", mtime=i, size=10) for i in range(10)]
    assert [f.path for f in l2_janitor.victims(files, capacity=100, high=0.9, low=0.5)] == [
        "f0",
        "f1",
        "f2",
        "f3",
        "f4",
    ]
    assert l2_janitor.victims(files, capacity=200, high=0.9, low=0.5) == []


def test_an_unreadable_l2_fails_the_job_instead_of_reporting_nothing_to_do(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "dead-mount"), "1000", "0.85", "0.70"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "FileNotFoundError" in result.stderr


def test_a_stuck_run_cannot_block_the_next_ones(dev_env):
    from tests.test_curvine_l2_charts import render_env

    cronjob = next(o for o in render_env(dev_env)["CurvineStorageChart"] if o["kind"] == "CronJob")
    assert cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0
