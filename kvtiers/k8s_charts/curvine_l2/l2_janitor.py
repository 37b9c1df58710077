"""The Curvine L2's janitor (kvtiers): keeps the L2 below its high watermark, least recently used chunks first, and
removes chunk files that no worker can serve any more. Runs as a long-lived pod that mounts the L2 claim and serves
its counters on ``/metrics``.

Why a janitor: LMCache's ``fs://`` connector never deletes, and Curvine v0.4.1's quota eviction deletes only files
whose TTL has expired (``quota_manager.rs`` -> ``ttl_executor.rs``). A client TTL is no way out: the FUSE client
gives the same TTL to the directories it creates (``fuse_utils.rs`` ``mkdir_opts``), and an expired directory is
deleted with everything below it, including the L2 root and LMCache's per-pod temporary directories.

Eviction order: least recently *used* first. Curvine v0.4.1 keeps an access time per file but sets it only at
creation and on an explicit ``setattr`` (``inode_file.rs``, ``inode_view.rs``); its FUSE client never updates it on a
read (and Linux marks FUSE inodes ``S_NOATIME``). The engines' L2 guard stamps it: after a chunk is read from the L2
it sets the file's access time, at most once per ``USE_STAMP_SECONDS`` per file (``kvtiers_l2_guard.py``). A file
never read since it was written keeps its creation time. tools/eviction_sim.py measures the order against the
oldest-written-first order on a trace of shared system prompts and long tails. The watermarks are fractions of the
configured capacity, or of what the leader says the workers in its map hold when that is less (a worker gone and not
replaced), so the surviving workers do not fill up.

Unreadable files: a Curvine worker that is lost (a HyperPod node replaced: its NVMe is wiped) leaves the files whose
blocks lived only there in the namespace; their reads fail, their size still counts. The janitor asks the leader
master which files have a block no live worker holds (``/api/block_locations`` answers HTTP 500 with "all replicas
has been lost" or "Lost (no worker can read)", ``worker_manager.rs``, ``master_filesystem.rs``) and deletes them,
with care: only the master that says it is the Raft leader (``/api/overview`` ``master_state`` "Active"; a standby
answers from an empty or stale worker map and would call every file lost), only when that leader counts at least
every expected worker as live (a new leader has not yet heard every heartbeat), only files that are complete (not being
written), and only when two runs in a row agree. A scan costs one request per file, so a full pass runs once after
every start (the janitor may have missed a loss: its own node may be the one replaced), then only when a worker the
leader knew has left its map (a replacement on the same address) or has joined its lost workers (a worker silent
for 10 minutes: only then does the master drop its location rows, even if a replacement registered before), when
the files below the mount hold more bytes than the leader says the workers store (the blocks of lost files are gone
from the workers but their sizes still count here), or when the last run left suspects.

Standard library only: it runs in the engine image (Python 3), which the GPU nodes already hold.

    python3 l2_janitor.py --root DIR --capacity-bytes N --high F --low F [--interval S] [--metrics-port P]
        [--masters URL,...] [--fs-path PATH] [--workers N] [--once] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LEADER_STATE = "Active"
"""``master_state`` of the Raft leader in ``/api/overview`` (``master_monitor.rs``, ``format!("{:?}")`` of the state)."""
LOST_MARKERS = ("all replicas has been lost", "Lost (no worker can read)")
"""What the master's error says when a block has no live worker (``worker_manager.rs`` ``create_locate_block``) or no
location at all (``master_filesystem.rs`` ``get_block_locs``); any other error (a file just deleted) is not a loss."""
GLOB_CHARACTERS = set("*?[{\\")
"""The master treats a path with these as a glob pattern (``master_filesystem.rs`` ``parse_glob_pattern``)."""
SIZE_MARGIN = 0.02
"""A lost-file scan starts when the files hold more than the leader's ``fs_used`` by this fraction of the capacity."""
HTTP_TIMEOUT_SECONDS = 10.0
DEFAULT_SCAN_RATE = 200.0
"""Block-location requests per second during a lost-file scan, so the scan never crowds the master's web thread."""


@dataclass(frozen=True)
class ChunkFile:
    path: str
    mtime: float
    atime: float
    size: int

    @property
    def last_use(self) -> float:
        """The guard's stamp of the last read, or when the file was written."""
        return max(self.atime, self.mtime)


def last_use(file: ChunkFile) -> float:
    return file.last_use


def stored_files(root: str) -> list[ChunkFile]:
    """Every regular file below ``root``; unreadable entries (a file another pod just renamed) are skipped, but an
    unreadable ``root`` (a dead FUSE mount) raises: a janitor that sees nothing must not report success."""
    files: list[ChunkFile] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            if folder == root:
                raise
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    files.append(ChunkFile(entry.path, stat.st_mtime, stat.st_atime, stat.st_size))
            except OSError:
                continue
    return files


def victims(
    files: Iterable[ChunkFile], capacity: int, high: float, low: float, key: Callable[[ChunkFile], float] = last_use
) -> list[ChunkFile]:
    """The files first in ``key`` order (least recently used) whose removal brings the stored bytes from at or
    above ``high`` down to ``low`` of ``capacity``."""
    files = list(files)
    used = sum(f.size for f in files)
    if used < high * capacity:
        return []
    chosen, target = [], low * capacity
    for file in sorted(files, key=key):
        if used <= target:
            break
        chosen.append(file)
        used -= file.size
    return chosen


# ------------------------------------------------------------------------------------------------------ metrics


@dataclass
class Metrics:
    """The janitor's counters, served in Prometheus's text format (names carry ``kvtiers_l2_janitor_``)."""

    runs: dict[str, int] = field(default_factory=lambda: {"ok": 0, "failed": 0})
    deleted_files: dict[str, int] = field(default_factory=lambda: {"watermark": 0, "lost": 0})
    freed_bytes: dict[str, int] = field(default_factory=lambda: {"watermark": 0, "lost": 0})
    delete_failures: int = 0
    lost_scans: dict[str, int] = field(
        default_factory=lambda: {"done": 0, "no_leader": 0, "workers_missing": 0, "not_needed": 0}
    )
    last_success: float = 0.0
    stored_bytes: int = 0
    files: int = 0
    capacity_bytes: int = 0
    high_watermark: float = 0.0
    lost_suspects: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def text(self) -> str:
        with self.lock:
            lines: list[str] = []

            def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                lines.extend(f"{name}{labels} {value:.17g}" for labels, value in samples)

            family(
                "kvtiers_l2_janitor_runs_total",
                "counter",
                "Janitor runs by result",
                [(f'{{result="{k}"}}', v) for k, v in self.runs.items()],
            )
            family(
                "kvtiers_l2_janitor_deleted_files_total",
                "counter",
                "Chunk files the janitor deleted, by reason (watermark: eviction; lost: no live worker holds a block)",
                [(f'{{reason="{k}"}}', v) for k, v in self.deleted_files.items()],
            )
            family(
                "kvtiers_l2_janitor_freed_bytes_total",
                "counter",
                "Bytes of the chunk files the janitor deleted, by reason",
                [(f'{{reason="{k}"}}', v) for k, v in self.freed_bytes.items()],
            )
            family(
                "kvtiers_l2_janitor_delete_failures_total",
                "counter",
                "Chunk files the janitor could not delete",
                [("", self.delete_failures)],
            )
            family(
                "kvtiers_l2_janitor_lost_scans_total",
                "counter",
                "Runs by what became of the lost-file check (done, no_leader, workers_missing, not_needed)",
                [(f'{{outcome="{k}"}}', v) for k, v in self.lost_scans.items()],
            )
            family(
                "kvtiers_l2_janitor_last_success_timestamp_seconds",
                "gauge",
                "Unix time of the end of the last run that succeeded",
                [("", self.last_success)],
            )
            family("kvtiers_l2_janitor_stored_bytes", "gauge", "Bytes below the L2 mount", [("", self.stored_bytes)])
            family("kvtiers_l2_janitor_files", "gauge", "Files below the L2 mount", [("", self.files)])
            family(
                "kvtiers_l2_janitor_capacity_bytes",
                "gauge",
                "The L2 capacity the watermarks are fractions of",
                [("", self.capacity_bytes)],
            )
            family(
                "kvtiers_l2_janitor_high_watermark_ratio",
                "gauge",
                "Stored bytes at which eviction starts, as a fraction of the capacity",
                [("", self.high_watermark)],
            )
            family(
                "kvtiers_l2_janitor_lost_suspects",
                "gauge",
                "Files the last scan found without a live block, to be deleted when the next run agrees",
                [("", self.lost_suspects)],
            )
            return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int) -> ThreadingHTTPServer:
    """``GET /metrics`` on ``port`` in a daemon thread: a hung L2 mount stalls a run, never the scrape."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


# ------------------------------------------------------------------------------------------------------ the master


class MasterError(Exception):
    """A master did not answer as expected."""


def http_get(url: str) -> tuple[int, object]:
    """Status and parsed JSON body; HTTP errors are answers (the master reports a lost block as a 500)."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_SECONDS) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read() or b"null")
        except ValueError:
            body = None
        return error.code, body
    except (OSError, ValueError) as error:
        raise MasterError(f"{url}: {error}") from None


def leader_overview(masters: list[str]) -> tuple[str, dict[str, Any]] | None:
    """The web URL and ``/api/overview`` of the master that says it is the Raft leader; ``None``: none does."""
    for base in masters:
        try:
            status, body = http_get(f"{base}/api/overview")
        except MasterError:
            continue
        if status == 200 and isinstance(body, dict) and body.get("master_state") == LEADER_STATE:
            return base, body
    return None


@dataclass(frozen=True)
class WorkerMap:
    """The worker ids the leader knows: in its map (``live_workers`` of ``/api/workers``, any status: Live,
    Blacklist, Decommission) and lost (``lost_workers``)."""

    mapped: frozenset[int]
    lost: frozenset[int]

    def losses_since(self, before: WorkerMap) -> frozenset[int]:
        """Ids that left the map or joined the lost workers since ``before``: the events that make blocks lost."""
        return (before.mapped - self.mapped) | (self.lost - before.lost)


def worker_map(leader: str) -> WorkerMap:
    status, body = http_get(f"{leader}/api/workers")
    if status != 200 or not isinstance(body, dict):
        raise MasterError(f"{leader}/api/workers answered {status}")

    def ids(key: str) -> frozenset[int]:
        return frozenset(int(w["address"]["worker_id"]) for w in body.get(key) or [])

    return WorkerMap(mapped=ids("live_workers"), lost=ids("lost_workers"))


def is_lost(leader: str, curvine_path: str) -> bool:
    """Whether the leader says a block of the file has no live worker (and the file is complete)."""
    query = urllib.parse.urlencode({"path": curvine_path})
    status, body = http_get(f"{leader}/api/block_locations?{query}")
    if status == 200:
        return False
    message = body.get("message", "") if isinstance(body, dict) else ""
    if not any(marker in message for marker in LOST_MARKERS):
        return False
    # A block being written has no location yet either: only a complete file is lost.
    status, body = http_get(f"{leader}/api/browse?{query}")
    if status != 200 or not isinstance(body, list) or len(body) != 1:
        return False
    return bool(body[0].get("is_complete")) and not body[0].get("is_dir")


def curvine_root(mount_point: str, fs_path: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The Curvine path the L2 mount shows: the CSI driver mounts ``fs-path`` with FUSE and bind-mounts the
    volume's directory below it into the pod (``node.go``), so the mount's root within the FUSE file system (the
    fourth field of ``/proc/self/mountinfo``) is the path below ``fs_path``."""
    target = os.path.realpath(mount_point)
    with open(mountinfo) as table:
        for line in table:
            fields = line.split()
            if len(fields) > 4 and fields[4] == target:
                below = fields[3].replace("\\040", " ")
                return fs_path.rstrip("/") + ("" if below == "/" else below)
    raise MasterError(f"{mount_point} is not a mount point (no line in {mountinfo})")


# ------------------------------------------------------------------------------------------------------ a run


@dataclass
class LostFiles:
    """What the lost-file check remembers between runs."""

    known_workers: WorkerMap | None = None
    """The leader's worker map at the last run that trusted a leader (None: none since the janitor started)."""
    passing: bool = True
    """A full pass over the files is under way (it may take several runs: :attr:`Janitor.scan_budget`). True at
    start: one full pass after every start, for the losses the janitor did not see."""
    cursor: str = ""
    """The last path the pass checked (files are checked in path order)."""
    excess_armed: bool = True
    """The size trigger fires again only after a run saw no excess, so a lasting mismatch does not scan forever."""
    suspects: set[str] = field(default_factory=set)


@dataclass
class Janitor:
    root: str
    capacity: int
    high: float
    low: float
    masters: list[str]
    fs_path: str
    workers: int
    dry_run: bool = False
    scan_budget: int = 60_000
    """Block-location checks per run at most (a pass over more files continues in the next runs)."""
    scan_rate: float = DEFAULT_SCAN_RATE
    mountinfo: str = "/proc/self/mountinfo"
    metrics: Metrics = field(default_factory=Metrics)
    lost: LostFiles = field(default_factory=LostFiles)
    reported_capacity: tuple[int, ...] = ()
    """The leader's ``capacity`` (what the workers in its map hold) in the last runs that found a leader, at most two."""

    def __post_init__(self) -> None:
        self.metrics.capacity_bytes = self.capacity
        self.metrics.high_watermark = self.high

    @property
    def live_capacity(self) -> int:
        """The capacity the watermarks are fractions of: the configured one, or less when the leader has reported
        less in two runs in a row (a worker gone and not replaced: its NVMe no longer holds anything). Two reports,
        because a new leader counts only the workers it has heard so far."""
        if len(self.reported_capacity) < 2:
            return self.capacity
        return min(self.capacity, max(self.reported_capacity))

    def _leader_reported(self, overview: dict[str, Any] | None) -> None:
        reported = int(overview.get("capacity", 0)) if overview is not None else 0
        self.reported_capacity = (*self.reported_capacity, reported)[-2:] if reported > 0 else ()

    def run(self) -> str:
        files = stored_files(self.root)
        lost_note, files = self._remove_lost(files)
        capacity = self.live_capacity
        used = sum(f.size for f in files)
        removed, freed = self._delete(victims(files, capacity, self.high, self.low), "watermark")
        with self.metrics.lock:
            self.metrics.files = len(files) - removed
            self.metrics.stored_bytes = used - freed
            self.metrics.capacity_bytes = capacity
        return (
            f"{len(files)} files, {used} of {capacity} bytes; evicted {removed} files, {freed} bytes "
            f"(least recently used first){' (dry run)' if self.dry_run else ''}; {lost_note}"
        )

    def _delete(self, chosen: Iterable[ChunkFile], reason: str) -> tuple[int, int]:
        removed = freed = 0
        for file in chosen:
            if not self.dry_run:
                try:
                    os.unlink(file.path)
                except FileNotFoundError:
                    continue  # already gone (an engine's guard, a rename, an earlier run)
                except OSError:
                    with self.metrics.lock:
                        self.metrics.delete_failures += 1
                    continue
            removed += 1
            freed += file.size
        with self.metrics.lock:
            self.metrics.deleted_files[reason] += removed
            self.metrics.freed_bytes[reason] += freed
        return removed, freed

    def _outcome(self, outcome: str) -> None:
        with self.metrics.lock:
            self.metrics.lost_scans[outcome] += 1
            self.metrics.lost_suspects = len(self.lost.suspects)

    def _distrust(self, outcome: str, note: str) -> str:
        """No trustworthy leader this run: forget the suspects (two runs must agree under one); a pass that was
        needed starts again from the beginning once a leader is trusted."""
        if self.lost.suspects or self.lost.passing:
            self.lost.passing, self.lost.cursor = True, ""
        self.lost.suspects.clear()
        self._outcome(outcome)
        return note

    def _remove_lost(self, files: list[ChunkFile]) -> tuple[str, list[ChunkFile]]:
        """Delete the files two checks in a row found without a live block; returns a note and the files left."""
        if not self.masters:
            return "no masters configured for the lost-file check", files
        found = leader_overview(self.masters)
        self._leader_reported(found[1] if found is not None else None)
        if found is None:
            return self._distrust("no_leader", "lost-file check skipped: no master says it is the leader"), files
        leader, overview = found
        live = int(overview.get("live_workers", 0))
        if live < self.workers:
            note = f"lost-file check skipped: the leader sees {live} live workers, expected at least {self.workers}"
            return self._distrust("workers_missing", note), files
        workers = worker_map(leader)
        stored = sum(f.size for f in files)
        excess = stored - int(overview.get("fs_used", 0)) > SIZE_MARGIN * self.capacity
        before = self.lost.known_workers
        lost_workers = workers.losses_since(before) if before is not None else frozenset()
        self.lost.known_workers = workers
        if lost_workers or (excess and self.lost.excess_armed):
            # a pass under way starts again: files it already checked may have lost their blocks since
            self.lost.passing, self.lost.cursor = True, ""
            self.lost.excess_armed = False
        if not excess:
            self.lost.excess_armed = True
        if not (self.lost.passing or self.lost.suspects):
            self._outcome("not_needed")
            return "no lost-file check needed", files
        root = curvine_root(self.root, self.fs_path, self.mountinfo)
        by_path = {f.path: f for f in files}
        candidates = sorted(p for p in self.lost.suspects if p in by_path)
        if self.lost.passing:
            rest = sorted(p for p in by_path if p > self.lost.cursor and p not in self.lost.suspects)
            batch = rest[: max(0, self.scan_budget - len(candidates))]
            candidates += batch
            if len(batch) == len(rest):
                self.lost.passing, self.lost.cursor = False, ""
            else:
                self.lost.cursor = batch[-1]
        now_lost: set[str] = set()
        pause = 1.0 / self.scan_rate if self.scan_rate > 0 else 0.0
        for path in candidates:
            curvine_path = f"{root}/{os.path.relpath(path, self.root)}"
            if not GLOB_CHARACTERS & set(curvine_path) and is_lost(leader, curvine_path):
                now_lost.add(path)
            if pause:
                time.sleep(pause)
        confirmed = now_lost & self.lost.suspects
        removed, freed = self._delete((by_path[p] for p in sorted(confirmed)), "lost")
        self.lost.suspects = now_lost - confirmed
        self._outcome("done")
        left = [f for f in files if f.path not in confirmed]
        return (
            f"lost-file check of {len(candidates)} files: {removed} deleted ({freed} bytes), "
            f"{len(self.lost.suspects)} to confirm next run"
            + (" (pass continues next run)" if self.lost.passing else "")
        ), left


def run_once(janitor: Janitor) -> bool:
    try:
        note = janitor.run()
    except Exception as error:  # noqa: BLE001 - any failure is a failed run, counted and logged
        with janitor.metrics.lock:
            janitor.metrics.runs["failed"] += 1
        print(f"kvtiers l2-janitor: run failed: {type(error).__name__}: {error}", flush=True)
        return False
    with janitor.metrics.lock:
        janitor.metrics.runs["ok"] += 1
        janitor.metrics.last_success = time.time()
    print(f"kvtiers l2-janitor: {note}", flush=True)
    return True


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="l2_janitor.py")
    parser.add_argument("--root", required=True, help="the L2 mount")
    parser.add_argument("--capacity-bytes", type=int, required=True)
    parser.add_argument("--high", type=float, required=True)
    parser.add_argument("--low", type=float, required=True)
    parser.add_argument("--interval", type=float, default=600.0, help="seconds from the start of one run to the next")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve /metrics here (0: do not)")
    parser.add_argument("--masters", default="", help="comma-separated master web URLs (http://host:port)")
    parser.add_argument("--fs-path", default="/", help="the Curvine path the StorageClass serves")
    parser.add_argument("--workers", type=int, default=0, help="Curvine workers the cluster should have")
    parser.add_argument("--scan-rate", type=float, default=DEFAULT_SCAN_RATE, help="block-location checks per second")
    parser.add_argument("--once", action="store_true", help="one run; exit 1 if it failed")
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    janitor = Janitor(
        root=args.root,
        capacity=args.capacity_bytes,
        high=args.high,
        low=args.low,
        masters=[m.rstrip("/") for m in args.masters.split(",") if m],
        fs_path=args.fs_path,
        workers=args.workers,
        dry_run=args.dry_run,
        scan_rate=args.scan_rate,
        # Half a run's interval of checks at the scan rate: the rest of the interval stays for eviction.
        scan_budget=max(1, int(args.scan_rate * args.interval / 2)),
    )
    if args.once:
        return 0 if run_once(janitor) else 1
    if args.metrics_port:
        serve_metrics(janitor.metrics, args.metrics_port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        began = time.monotonic()
        run_once(janitor)
        stop.wait(max(0.0, args.interval - (time.monotonic() - began)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
