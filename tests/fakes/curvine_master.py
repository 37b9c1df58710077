"""A Curvine v0.4.1 master's web API on 127.0.0.1, modelled on what its source does (CurvineIO/curvine tag v0.4.1),
not on what the janitor expects: the routes of ``curvine-master/src/master/router_handler.rs`` over a worker map and
block-location rows that change as the master's own code changes them when a worker goes silent or comes back.

- ``/api/overview``: ``live_workers`` counts workers with status ``Live`` only (``master_filesystem.rs``
  ``master_info``); ``master_state`` is ``Active`` on the Raft leader, ``Standby`` on a follower (``master_monitor.rs``
  ``journal_state``, printed with ``{:?}``).
- ``/api/workers``: ``{"live_workers": [...], "lost_workers": [...]}``; the first holds every worker in the map,
  blacklisted ones included (``router_handler.rs`` ``workers``); ``WorkerInfo`` has ``address.worker_id`` and
  ``status`` (``worker_info.rs``, ``worker_status.rs``).
- ``/api/block_locations?path=``: ``FileBlocks`` (``block_info.rs``); a block without location rows fails with
  "File {path}, block {id} Lost (no worker can read)" (``master_filesystem.rs`` ``get_block_locs``), a block whose rows
  name only workers absent from the map fails with "File {path} block {id}, all replicas has been lost"
  (``worker_manager.rs`` ``create_locate_block``). Errors are HTTP 500 with ``{"message": <Display of the error>}``
  (``curvine-error/src/fs_error.rs`` ``IntoResponse``); ``err_box!`` formats "[<thread>] ERROR: <text>(<file>:<line>)"
  (``crates/core/error/src/lib.rs`` ``err_msg!``) and ``ErrorImpl`` appends ": <context>" (``error_impl.rs``).
- ``/api/browse?path=``: a file's path gives ``[its FileStatus]``, a directory's its children (``fs_dir.rs``
  ``list_status``); ``is_complete`` is false while the file is being written (``file_status.rs``).

Worker life cycle (``heartbeat_checker.rs``, ``fs/state/worker_map.rs``): silent for 30 s, a worker is blacklisted but stays in
the map (its address is still returned as a location); silent for 10 minutes, it moves to the lost workers and its
location rows are deleted (``delete_locations``); a new worker id on the same host, IP and RPC port removes an old id that is still in
the map *without* deleting its rows (``remove_same_endpoint``). A follower's worker
map is empty: workers heartbeat only to the leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.fakes.loopback import LoopbackServer, send_json

THREAD = "tokio-runtime-worker"


def err_box(text: str, file: str, line: int) -> str:
    """The Display of an ``err_box!`` error (``err_msg!`` then ``ErrorImpl``'s ``"{source}: {context}"``)."""
    return f"[{THREAD}] ERROR: {text}({file}:{line}): "


@dataclass
class Worker:
    worker_id: int
    hostname: str
    status: str = "Live"

    def info(self) -> dict:
        return {
            "address": {
                "worker_id": self.worker_id,
                "hostname": self.hostname,
                "ip_addr": self.hostname,
                "rpc_port": 8997,
                "web_port": 9001,
            },
            "status": self.status,
            "capacity": 1000,
            "available": 500,
            "fs_used": 500,
        }


@dataclass
class StoredFile:
    blocks: list[int]
    length: int
    complete: bool = True


@dataclass
class CurvineMaster:
    state: str = "Active"
    workers: dict[int, Worker] = field(default_factory=dict)
    lost_workers: dict[int, Worker] = field(default_factory=dict)
    files: dict[str, StoredFile] = field(default_factory=dict)
    rows: dict[int, list[int]] = field(default_factory=dict)
    """Block id -> the worker ids of its location rows."""
    next_block: int = 1
    requests: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ what happens

    def register(self, worker_id: int, hostname: str) -> None:
        """A worker starts (a new id when its data directory is new: ``version.rs`` makes a random id)."""
        for old in [w for w in self.workers.values() if w.hostname == hostname and w.worker_id != worker_id]:
            # remove_same_endpoint: out of the map (and the lost list); its location rows stay
            del self.workers[old.worker_id]
            self.lost_workers.pop(old.worker_id, None)
        self.workers[worker_id] = Worker(worker_id, hostname)

    def blacklist(self, worker_id: int) -> None:
        """Silent for more than ``worker_blacklist_interval`` (30 s)."""
        self.workers[worker_id].status = "Blacklist"

    def lose(self, worker_id: int) -> None:
        """Silent for more than ``worker_lost_interval`` (10 min): lost, and its location rows deleted."""
        worker = self.workers.pop(worker_id)
        worker.status = "Lost"
        self.lost_workers[worker_id] = worker
        for block, holders in self.rows.items():
            self.rows[block] = [w for w in holders if w != worker_id]

    def write(self, path: str, *holders: int | None, length: int = 100, complete: bool = True) -> None:
        """A file with one block per holder (``None``: a block still being written, without a row yet)."""
        blocks = []
        for holder in holders:
            block, self.next_block = self.next_block, self.next_block + 1
            self.rows[block] = [] if holder is None else [holder]
            blocks.append(block)
        self.files[path] = StoredFile(blocks, length, complete)

    def delete(self, path: str) -> None:
        self.files.pop(path, None)

    # ------------------------------------------------------------------------------------------ the web API

    def overview(self) -> dict:
        live = [w for w in self.workers.values() if w.status == "Live"]
        return {
            "cluster_id": "kvtiers",
            "master_addr": "curvine-master-0:8995",
            "start_time": "2026-12-03 00:00:00",
            "live_workers": len(live),
            "lost_workers": len(self.lost_workers),
            "available": sum(500 for _ in self.workers),
            "capacity": sum(1000 for _ in self.workers),
            # What the workers in the map report they store: the blocks of a lost worker are not counted.
            "fs_used": sum(
                f.length for f in self.files.values() if all(set(self.rows[b]) & set(self.workers) for b in f.blocks)
            ),
            "reserved_bytes": 0,
            "files_total": len(self.files),
            "dir_total": 1,
            "master_state": self.state,
        }

    def status(self, path: str) -> dict:
        stored = self.files[path]
        return {
            "id": hash(path) & 0xFFFF,
            "path": path,
            "name": path.rsplit("/", 1)[-1],
            "is_dir": False,
            "mtime": 0,
            "atime": 0,
            "children_num": 0,
            "is_complete": stored.complete,
            "len": stored.length,
            "replicas": 1,
            "block_size": 64 << 20,
        }

    def block_locations(self, path: str) -> tuple[int, dict]:
        if path not in self.files:
            return 500, {"message": f"File {path} not found: "}
        located = []
        for block in self.files[path].blocks:
            holders = self.rows.get(block)
            if not holders:
                text = f"File {path}, block {block} Lost (no worker can read)"
                return 500, {"message": err_box(text, "curvine-master/src/master/fs/master_filesystem.rs", 798)}
            addresses = [self.workers[w].info()["address"] for w in holders if w in self.workers]
            if not addresses:
                text = f"File {path} block {block}, all replicas has been lost"
                return 500, {"message": err_box(text, "curvine-master/src/master/fs/worker_manager.rs", 216)}
            located.append({"block": {"id": block, "len": 100}, "locs": addresses, "has_spdk": False})
        return 200, {"status": self.status(path), "block_locs": located}

    def browse(self, path: str) -> tuple[int, object]:
        if path in self.files:
            return 200, [self.status(path)]
        prefix = path.rstrip("/") + "/"
        children = [self.status(p) for p in sorted(self.files) if p.startswith(prefix) and "/" not in p[len(prefix) :]]
        return 200, children

    def answer(self, url: str) -> tuple[int, object]:
        self.requests.append(url)
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        path = (query.get("path") or [None])[0]
        if parsed.path == "/api/overview":
            return 200, self.overview()
        if parsed.path == "/api/workers":
            return 200, {
                "live_workers": [w.info() for w in self.workers.values()],
                "lost_workers": [w.info() for w in self.lost_workers.values()],
            }
        if parsed.path in ("/api/block_locations", "/api/browse"):
            if path is None:
                text = "missing required query parameter: path"
                return 500, {"message": err_box(text, "curvine-master/src/master/router_handler.rs", 181)}
            return self.block_locations(path) if parsed.path == "/api/block_locations" else self.browse(path)
        return 404, None


class CurvineMasterServer(LoopbackServer):
    """Serves one :class:`CurvineMaster` (a follower's view when ``master.state`` is ``Standby``)."""

    def __init__(self, master: CurvineMaster) -> None:
        self.master = master
        self._serve()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        master = self.master

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                code, body = master.answer(self.path)
                send_json(self, code, body)

        return Handler
