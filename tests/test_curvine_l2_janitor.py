"""The L2 janitor (the Curvine L2's eviction and its cleanup after a lost worker), run on real directory trees, against
a Curvine v0.4.1 master's web API modelled on its source (tests/fakes/curvine_master.py), and scraped as the
collector scrapes it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kvtiers.k8s_charts.curvine_l2 import l2_janitor
from kvtiers.k8s_charts.curvine_l2.l2_janitor import ChunkFile, Janitor, run_once, victims
from tests.fakes.curvine_master import CurvineMaster, CurvineMasterServer
from tests.promtool import promtool
from tests.waiting import HANG_BOUND_SECONDS, until

SCRIPT = Path(l2_janitor.__file__)
NOW = 2_000_000_000
FS_PATH = "/l2cache"
VOLUME = "/pvc-0a1b"
"""The claim's directory below ``fs-path`` (the CSI driver names it after the PersistentVolume)."""


def chunk(root: Path, name: str, size: int, written_ago: int, used_ago: int | None = None) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    written = NOW - written_ago
    used = written if used_ago is None else NOW - used_ago
    os.utime(path, (used, written))
    return path


def once(root: Path, capacity: int, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--root",
            str(root),
            "--capacity-bytes",
            str(capacity),
            "--high",
            "0.85",
            "--low",
            "0.70",
            "--once",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_SECONDS,
        check=check,
    )


# ------------------------------------------------------------------------------------------------------ eviction


def test_above_the_high_watermark_the_least_recently_used_files_go_down_to_the_low_one(tmp_path):
    # Written long ago but read a minute ago (a shared system prompt: the guard stamped it) ...
    hot = [chunk(tmp_path, f"ns/prefix-{i}.data", 100, written_ago=9000, used_ago=60) for i in range(3)]
    # ... written long ago and never read since (tails of old requests) ...
    cold = [chunk(tmp_path, f"ns/tail-{i}.data", 100, written_ago=5000 + i) for i in range(4)]
    # ... and written a moment ago.
    new = [chunk(tmp_path, f"ns/new-{i}.data", 100, written_ago=10 + i) for i in range(3)]
    result = once(tmp_path, capacity=1100)  # 1000 of 1100 bytes: above 85 %, down to 770
    assert [p.exists() for p in cold] == [True, False, False, False]  # least recently used first
    assert all(p.exists() for p in hot + new)
    assert "evicted 3 files, 300 bytes" in result.stdout


def test_below_the_high_watermark_nothing_is_removed(tmp_path):
    files = [chunk(tmp_path, f"ns/f-{i}.data", 100, written_ago=i) for i in range(8)]
    once(tmp_path, capacity=1000)  # 80 % < 85 %
    assert all(p.exists() for p in files)


def test_directories_stay_even_when_emptied(tmp_path):
    """LMCache creates its namespace and per-pod temporary directories once, at start: they must survive."""
    chunk(tmp_path, "ns/tmp-pod-a/.keep", 0, written_ago=5000)
    for i in range(10):
        chunk(tmp_path, f"ns/c-{i}.data", 100, written_ago=2000 + i)
    once(tmp_path, capacity=1000)
    assert (tmp_path / "ns" / "tmp-pod-a").is_dir() and (tmp_path / "ns").is_dir()


def test_dry_run_removes_nothing(tmp_path):
    files = [chunk(tmp_path, f"f-{i}", 100, written_ago=i) for i in range(10)]
    result = once(tmp_path, 1000, "--dry-run")
    assert all(p.exists() for p in files) and "(dry run)" in result.stdout


def test_victims_are_least_recently_used_first_and_stop_at_the_low_watermark():
    files = [ChunkFile(f"f{i}", mtime=i, atime=100 - i if i % 2 else 0, size=10) for i in range(10)]
    # never read: f0, f2, f4, f6, f8 by write time; read: f9 (91) before f7 (93) ...
    assert [f.path for f in victims(files, capacity=100, high=0.9, low=0.5)] == ["f0", "f2", "f4", "f6", "f8"]
    assert victims(files, capacity=200, high=0.9, low=0.5) == []


def test_an_unreadable_l2_fails_the_run_instead_of_reporting_nothing_to_do(tmp_path):
    result = once(tmp_path / "dead-mount", 1000, check=False)
    assert result.returncode == 1 and "run failed: FileNotFoundError" in result.stdout


# ------------------------------------------------------------------------------------------------------ lost workers


@pytest.fixture
def cluster():
    """Three workers, one file on each, and the L2 mount as the janitor's pod sees it."""
    master = CurvineMaster()
    for worker_id, host in ((11, "10.1.0.1"), (12, "10.1.0.2"), (13, "10.1.0.3")):
        master.register(worker_id, host)
    with CurvineMasterServer(master) as server:
        yield master, server


def mount(tmp_path: Path, master: CurvineMaster, holders: dict[str, int | None], **kwargs) -> Path:
    """The files as the FUSE mount shows them and as the master stores them (one block each)."""
    root = tmp_path / "l2"
    for name, holder in holders.items():
        chunk(root, name, 100, written_ago=100)
        master.write(f"{FS_PATH}{VOLUME}/{name}", holder, **kwargs)
    (tmp_path / "mountinfo").write_text(
        f"2000 1900 0:77 {VOLUME} {root} rw,relatime - fuse.curvine-fuse curvine rw,user_id=0,group_id=0\n"
    )
    return root


def janitor(tmp_path: Path, root: Path, *masters: CurvineMasterServer, capacity: int = 1_000_000, **kwargs) -> Janitor:
    return Janitor(
        root=str(root),
        capacity=capacity,
        high=0.85,
        low=0.70,
        masters=[m.url for m in masters],
        fs_path=FS_PATH,
        workers=3,
        scan_rate=0,
        mountinfo=str(tmp_path / "mountinfo"),
        **kwargs,
    )


def block_requests(master: CurvineMaster) -> int:
    return sum(1 for r in master.requests if r.startswith("/api/block_locations"))


def test_a_file_whose_only_block_was_on_a_replaced_node_is_deleted_when_two_runs_agree(tmp_path, cluster):
    """The node of worker 11 is replaced: its NVMe is wiped, the new worker gets a new id on the same address, and
    the master drops the old id without deleting its location rows ("all replicas has been lost")."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    j = janitor(tmp_path, root, server)
    assert run_once(j)  # the reference: which workers are live
    master.register(21, "10.1.0.1")
    assert run_once(j)
    assert (root / "a.data").exists(), "one run alone never deletes"
    assert j.metrics.lost_suspects == 1
    assert run_once(j)
    assert not (root / "a.data").exists() and (root / "b.data").exists() and (root / "c.data").exists()
    assert j.metrics.deleted_files["lost"] == 1 and j.metrics.freed_bytes["lost"] == 100


def test_a_file_of_a_worker_lost_for_ten_minutes_is_deleted(tmp_path, cluster):
    """Silent for 10 minutes, worker 12 is lost and its location rows go ("Lost (no worker can read)"); a new node
    with another address brings the live count back to three."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.lose(12)
    master.register(22, "10.1.0.9")
    run_once(j)
    run_once(j)
    assert not (root / "b.data").exists() and (root / "a.data").exists()
    assert j.metrics.deleted_files["lost"] == 1


def test_while_a_worker_is_only_blacklisted_nothing_is_deleted(tmp_path, cluster):
    """A blacklisted worker stays in the map and the master still names it as a location: not lost yet."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12})
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.blacklist(11)
    master.register(21, "10.1.0.7")
    for _ in range(3):
        run_once(j)
    assert (root / "a.data").exists() and j.metrics.deleted_files["lost"] == 0


def test_a_replacement_registered_while_the_old_worker_is_only_blacklisted_then_the_loss(tmp_path, cluster):
    """HyperPod replaces the node within 10 minutes: the new worker (another address) registers while the old one is
    only blacklisted (still in the map, still named as a location); 10 minutes after it fell silent the old one is
    lost and its location rows go, while the live workers stay the same."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.blacklist(11)
    master.register(21, "10.1.0.7")
    run_once(j)
    run_once(j)
    assert (root / "a.data").exists(), "blacklisted only: still readable as far as the master says"
    master.lose(11)
    run_once(j)
    run_once(j)
    assert not (root / "a.data").exists() and (root / "b.data").exists() and (root / "c.data").exists()
    assert j.metrics.deleted_files["lost"] == 1


def test_a_janitor_started_after_the_loss_finds_the_unreadable_files(tmp_path, cluster):
    """The janitor's own node was the replaced one: it starts after the loss, with no memory of the workers before;
    one full pass after every start finds what a change it never saw left behind."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    master.lose(11)
    master.register(21, "10.1.0.7")
    j = janitor(tmp_path, root, server)
    run_once(j)
    run_once(j)
    assert not (root / "a.data").exists() and (root / "b.data").exists() and (root / "c.data").exists()
    assert j.metrics.deleted_files["lost"] == 1


def test_with_a_worker_gone_and_not_replaced_the_watermarks_are_fractions_of_what_the_live_workers_hold(
    tmp_path, cluster
):
    """Three workers of 1,000 bytes (the fake master's report); 20 files of 100 bytes fill 67 % of them. Worker 13
    goes and is not replaced: 2,000 bytes are left, so the files fill 100 % and eviction must start, down to 70 % of
    2,000. A leader that reports less only once (a new leader that has not heard every worker yet) is not believed."""
    master, server = cluster
    root = mount(tmp_path, master, {f"f{i:02}.data": 11 + i % 2 for i in range(20)})
    j = janitor(tmp_path, root, server, capacity=3000)
    run_once(j)
    assert len(list(root.iterdir())) == 20
    master.lose(13)
    run_once(j)
    assert len(list(root.iterdir())) == 20, "one report of less capacity is not enough"
    run_once(j)
    assert sum(f.stat().st_size for f in root.iterdir()) <= 0.70 * 2000
    assert j.metrics.capacity_bytes == 2000 and j.metrics.deleted_files["watermark"] == 6


def test_more_live_workers_than_deployed_still_lets_the_check_run(tmp_path, cluster):
    """A worker group grown outside the config (or a replacement up before the old id leaves the map) counts more
    live workers than expected: the check runs, since every expected worker has been heard."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    master.register(14, "10.1.0.4")
    j = janitor(tmp_path, root, server)
    master.register(21, "10.1.0.1")  # worker 11's node replaced: four live workers, three expected
    run_once(j)
    run_once(j)
    assert j.metrics.lost_scans["workers_missing"] == 0
    assert not (root / "a.data").exists() and (root / "b.data").exists()


def test_a_standby_master_is_never_asked_for_block_locations(tmp_path, cluster):
    """A follower's worker map is empty: it would call every file lost."""
    master, leader = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    follower_view = CurvineMaster(state="Standby", files=master.files, rows=master.rows)
    with CurvineMasterServer(follower_view) as follower:
        j = janitor(tmp_path, root, follower, leader)
        run_once(j)
        master.register(21, "10.1.0.1")  # a real loss, so that the leader is asked
        run_once(j)
        run_once(j)
        alone = janitor(tmp_path, root, follower)
        for _ in range(3):
            run_once(alone)
    assert block_requests(follower_view) == 0
    assert not (root / "a.data").exists() and (root / "b.data").exists() and (root / "c.data").exists()
    assert alone.metrics.lost_scans["no_leader"] == 3


def test_a_leader_that_has_not_heard_every_worker_is_not_trusted(tmp_path, cluster):
    """After a leader change the new leader knows only the workers whose heartbeats it has seen; suspects found
    before are forgotten, so two runs must agree under a leader that sees every worker."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.register(21, "10.1.0.1")
    run_once(j)
    assert j.metrics.lost_suspects == 1
    worker = master.workers.pop(13)  # the new leader has not heard worker 13 yet
    run_once(j)
    assert j.metrics.lost_suspects == 0 and j.metrics.lost_scans["workers_missing"] == 1
    master.workers[13] = worker
    run_once(j)
    assert (root / "a.data").exists(), "the first agreeing run after the gap is only the first"
    run_once(j)
    assert not (root / "a.data").exists()


def test_a_file_still_being_written_is_never_deleted(tmp_path, cluster):
    """Its last block has no location yet, so the master says it is lost; the file is not complete."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11})
    master.write(f"{FS_PATH}{VOLUME}/writing.data.tmp", None, complete=False)
    chunk(root, "writing.data.tmp", 100, written_ago=1)
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.register(23, "10.1.0.3")  # worker 13's node replaced: a pass over every file
    for _ in range(3):
        run_once(j)
    assert any("writing.data.tmp" in r for r in master.requests if r.startswith("/api/block_locations"))
    assert (root / "writing.data.tmp").exists()


def test_a_file_stored_again_between_two_runs_is_kept(tmp_path, cluster):
    """An engine's guard deleted the unreadable file and the next request stored it again on a live worker."""
    master, server = cluster
    root = mount(tmp_path, master, {"a.data": 11, "b.data": 12, "c.data": 13})
    j = janitor(tmp_path, root, server)
    run_once(j)
    master.register(21, "10.1.0.1")
    run_once(j)
    assert j.metrics.lost_suspects == 1
    master.write(f"{FS_PATH}{VOLUME}/a.data", 21)
    run_once(j)
    assert (root / "a.data").exists() and j.metrics.deleted_files["lost"] == 0


def test_without_a_change_no_file_is_checked_and_a_large_pass_spans_runs(tmp_path, cluster):
    """One request per file is the cost of a check: one pass after the start, then none while the workers stay the
    same and the sizes agree; a pass over more files than a run's budget continues in the next run."""
    master, server = cluster
    root = mount(tmp_path, master, {f"f{i}.data": 12 for i in range(5)} | {"a.data": 11})
    j = janitor(tmp_path, root, server, scan_budget=2)
    for _ in range(3):
        run_once(j)
    assert block_requests(master) == 6, "the pass after the start: six files, two per run"
    for _ in range(3):
        run_once(j)
    assert block_requests(master) == 6 and j.metrics.lost_scans["not_needed"] == 3
    master.requests.clear()
    master.register(21, "10.1.0.1")
    for _ in range(6):
        run_once(j)
    assert not (root / "a.data").exists() and all((root / f"f{i}.data").exists() for i in range(5))
    assert block_requests(master) <= 2 * 6


def test_the_mount_root_is_found_below_the_fs_path(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 259:1 / / rw - ext4 /dev/root rw\n"
        f"2000 1900 0:77 {VOLUME} /l2 rw,relatime - fuse.curvine-fuse curvine rw\n"
    )
    assert l2_janitor.curvine_root("/l2", FS_PATH, str(info)) == f"{FS_PATH}{VOLUME}"
    with pytest.raises(l2_janitor.MasterError):
        l2_janitor.curvine_root("/elsewhere", FS_PATH, str(info))


def test_the_fake_master_says_what_curvine_v0_4_1_says():
    """The error texts and routes the fake serves are the ones in Curvine v0.4.1's source (needs the mirror)."""
    from tests.upstream import require_upstream

    expected = {
        "curvine-master/src/master/fs/worker_manager.rs": ['"File {} block {}, all replicas has been lost"'],
        "curvine-master/src/master/fs/master_filesystem.rs": ['"File {}, block {} Lost (no worker can read)"'],
        "curvine-master/src/master/router_handler.rs": [
            '"/api/overview"',
            '"/api/workers"',
            '"/api/block_locations"',
            '"/api/browse"',
            '"missing required query parameter: path"',
            '"master_state": master_state',
        ],
        "crates/core/error/src/lib.rs": ['"[{}] ERROR: {}({}:{})"'],
        "curvine-master/src/master/master_monitor.rs": ["RoleState::Leader => MasterState::Active"],
    }
    for path, needles in expected.items():
        text = require_upstream(f"CurvineIO/curvine@v0.4.1:{path}")
        for needle in needles:
            assert needle in text, f"{needle} not in {path}"


# ------------------------------------------------------------------------------------------------------ as deployed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_metrics_say_what_the_janitor_really_freed_and_pass_promtool(tmp_path):
    """The long-running janitor as its Deployment runs it: /metrics counts the bytes it deleted (not what Curvine's
    quota eviction claims), and promtool accepts the exposition."""
    for i in range(10):
        chunk(tmp_path / "l2", f"ns/c-{i}.data", 100, written_ago=1000 + i)
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--root",
            str(tmp_path / "l2"),
            "--capacity-bytes",
            "1000",
            "--high",
            "0.85",
            "--low",
            "0.70",
            "--interval",
            "0.2",
            "--metrics-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            return response.read().decode()

    def after_two_runs() -> str | None:
        page = metrics()
        return page if 'kvtiers_l2_janitor_runs_total{result="ok"} 2' in page else None

    try:
        text = until(
            after_two_runs,
            what="the janitor's second run",
            process=process,
            seen=metrics,
            poll=0.1,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=HANG_BOUND_SECONDS)
    assert process.returncode == 0, "SIGTERM ends the loop cleanly"
    assert 'kvtiers_l2_janitor_freed_bytes_total{reason="watermark"} 300' in text, text
    assert 'kvtiers_l2_janitor_deleted_files_total{reason="watermark"} 3' in text
    assert "kvtiers_l2_janitor_stored_bytes 700" in text
    last_success = float(text.split("\nkvtiers_l2_janitor_last_success_timestamp_seconds ")[1].split()[0])
    assert abs(last_success - time.time()) < 60
    checked = subprocess.run([str(promtool()), "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_stale_namespace_is_evicted_before_the_live_one(tmp_path):
    """After an upgrade the engines write and read a new L2 namespace (a new fingerprint); nothing reads the old one
    again, so its files are the least recently used and go first, however recently they were written."""
    stale = [chunk(tmp_path, f"old-fingerprint/c-{i}.data", 100, written_ago=600 + i) for i in range(4)]
    live = [chunk(tmp_path, f"new-fingerprint/c-{i}.data", 100, written_ago=3000, used_ago=30) for i in range(6)]
    once(tmp_path, capacity=1000)  # 1000 bytes stored: down to 700
    assert [p.exists() for p in stale] == [True, False, False, False]  # oldest of them first
    assert all(p.exists() for p in live)
