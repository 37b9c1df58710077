"""kvtiers L2 guard: an LMCache L2 chunk that cannot be read costs a recompute, never a wrong answer.

This file runs inside the engine image (LMCache 0.3.11 under vLLM 0.12.0, Python 3.12), not in kvtiers: the serving
charts ship it in a ConfigMap, put its directory on ``PYTHONPATH`` and name it in vLLM's ``--kv-transfer-config``
(``kv_connector`` = :data:`CONNECTOR_CLASS`, ``kv_connector_module_path`` = this module). vLLM's
``KVConnectorFactory`` imports the module and takes the class by name; the class is vLLM's own
``LMCacheConnectorV1`` that, before it builds LMCache's engine, makes LMCache's engine builder guard every engine.

What LMCache 0.3.11 does when a chunk its lookup found cannot be read, and what the guard does instead (LMCache
files; line numbers of the 0.3.11 wheel are in docs/serving-contract.md):

1. ``cache_engine.py`` ``_process_tokens_internal`` keeps for the GPU copy only the chunks that end strictly before
   the failed chunk starts, yet reports the chunk just before it as loaded. vLLM's scheduler recomputes from the
   first block reported missing, so it treats KV it never received as computed: wrong output, cached in vLLM's
   prefix cache for later requests. The guard reports as loaded exactly the prefix the GPU copy covered.
2. The same function never releases the buffers of chunks it read but did not copy (L1 memory, once per failure).
   The guard releases them.
3. ``remote_backend.py`` ``contains`` waits for the file system without a bound; its reads wait
   ``blocking_timeout_secs`` per chunk and drop (never release) the buffers of reads still running when one fails.
   The guard replaces the remote backend's existence check and reads with bounded ones that wait at most
   ``blocking_timeout_secs`` in all, from the caller's side: a read still running then is left to finish in its own
   thread and its buffer is released when it does. After a timeout the L2 counts as absent for
   :data:`BREAKER_SECONDS` (misses, no writes), so a hung mount costs one bound per window instead of every request.
4. ``fs_connector.py`` ``get`` turns every error into a silent miss and never removes what it cannot read, so every
   later request fails on the same chunk. The guard inspects a chunk file that failed to load, in the background
   with its own bound, and deletes it when a read fails with an I/O error, its length disagrees with its header, or
   its header does not parse (and only if the file is still the one inspected); the next request then recomputes
   the chunk and stores a good copy.
5. Every event is counted (``prometheus_client`` in the pod's multiprocess directory, so vLLM's ``/metrics`` serves
   it) and logged with the prefix ``kvtiers-l2-guard``.
6. The L2 directory must show what it is mounted as (:class:`MountCheck`): after a FUSE restart a ``subPath`` bind can
   show the claim's root instead, where another endpoint's or format's chunks could be read; the L2 then counts as
   absent until the mount is right.
7. Curvine v0.4.1 keeps a file's access time but never updates it on a read (its FUSE client sets it only on an
   explicit ``setattr``), so nothing records which chunks are used. After a chunk is read from the L2 the guard sets
   the file's access time to now, at most once per :data:`USE_STAMP_SECONDS` per file, in a background thread that
   never delays the request; the L2 janitor evicts the least recently used chunks first (``l2_janitor.py``).

Not detectable at LMCache 0.3.11: a chunk file of the right length with wrong bytes (the format has no checksum).
The guard refuses to start under another LMCache version or with asynchronous or layerwise loading, whose code paths
it has not been tested against: an engine that fails at start is visible, a silently unguarded one is not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import importlib.metadata
import logging
import math
import os
import posixpath
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

SUPPORTED_LMCACHE = "0.3.11"
"""The only LMCache version whose internals the guard is tested against (tests/test_l2_faults.py)."""
CONNECTOR_CLASS = "KvtiersLMCacheConnectorV1"
BREAKER_SECONDS = 30.0
"""After an L2 call times out, the L2 counts as absent for this long: one stalled call per window, not per request."""
WRITE_TIMEOUT_SECONDS = 30.0
"""A chunk write still running after this is abandoned (its buffer released). Writes never stall a request, so the
bound only keeps a hung mount from holding L1 memory; it does not open the breaker, which a write burst could do."""
USE_STAMP_SECONDS = 300.0
"""A chunk read from the L2 gets a new access time only when its last one is older than this: a hot chunk costs the
Curvine master one journaled ``setattr`` per interval, not one per read. Half the janitor's default interval, so its
order is exact to within one run (tools/eviction_sim.py measures the loss against a stamp on every read)."""
MAX_PENDING_STAMPS = 256
"""Stamps waiting for the background thread at most; more are dropped (a slow or hung mount never queues memory)."""
LOG_PREFIX = "kvtiers-l2-guard"
MOUNT_CHECK_SECONDS = 10.0
"""How often the guard re-reads the mount table (a FUSE restart can change what the L2 directory shows)."""

MISSING = "missing"
"""The file vanished between lookup and load (the janitor, another engine's rewrite): nothing to repair."""
UNREADABLE = "unreadable"
"""Reading the file fails with an I/O error (Curvine: all replicas of its block lost; a failing disk)."""
UNAVAILABLE = "unavailable"
"""Reading fails for a reason that says nothing about the file (a dead FUSE mount, too many open files): kept."""
TRUNCATED = "truncated"
"""Fewer data bytes than the header declares."""
CORRUPT = "corrupt"
"""The header is short, does not parse, or disagrees with itself."""
INTACT = "intact"
"""The file reads back whole: the load failed for another reason (e.g. no L1 buffer), so the file stays."""
TIMEOUT = "timeout"
BROKEN = frozenset({UNREADABLE, TRUNCATED, CORRUPT})
"""Verdicts that delete the file."""
IO_ERRORS = frozenset({errno.EIO, errno.ENODATA})
"""Errors of a read that mean the file's data is gone (Curvine's FUSE answers EIO for a block with no replica)."""

logger = logging.getLogger("kvtiers.l2_guard")
if not logger.handlers:  # vLLM configures only its own loggers; without a handler nothing would be printed
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class GuardMetrics:
    """The guard's counters, created once per process (``prometheus_client`` refuses a second registration)."""

    _instance: GuardMetrics | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        from prometheus_client import Counter

        self.load_failures = Counter(
            "kvtiers_l2_load_failures", "L2 chunks the lookup found but the load could not read", ["reason"]
        )
        self.quarantined = Counter("kvtiers_l2_quarantined_files", "Unreadable L2 chunk files deleted")
        self.corrected_tokens = Counter(
            "kvtiers_l2_corrected_tokens",
            "Tokens LMCache reported loaded that were not copied to the GPU, reported to vLLM as not loaded",
        )
        self.released_buffers = Counter(
            "kvtiers_l2_released_buffers", "Chunk buffers read but not copied, released by the guard"
        )
        self.timeouts = Counter("kvtiers_l2_timeouts", "L2 calls that exceeded their bound", ["call"])
        self.breaker_trips = Counter("kvtiers_l2_breaker_trips", "Times the L2 was treated as absent for a window")
        self.skipped_writes = Counter("kvtiers_l2_skipped_writes", "Chunk writes skipped while the L2 counted absent")
        self.guarded_engines = Counter(
            "kvtiers_l2_guarded_engines", "LMCache engines the guard took over (one per worker process at start)"
        )
        self.wrong_mounts = Counter(
            "kvtiers_l2_wrong_mounts", "Mount checks that found the L2 directory showing another path (L2 absent)"
        )
        self.use_stamps = Counter("kvtiers_l2_use_stamps", "L2 chunk files whose access time was set after a read")
        self.use_stamp_failures = Counter(
            "kvtiers_l2_use_stamp_failures",
            "Use stamps the file system refused, by errno (EPERM: the pod's user may not set times on Curvine)",
            ["errno"],
        )

    @classmethod
    def get(cls) -> GuardMetrics:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as three octal digits (proc(5))."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def path_in_file_system(directory: str, mountinfo: str) -> str | None:
    """Where ``directory`` is inside the file system mounted over it: the mount's root (field 4 of its mountinfo
    line, the path a bind or ``subPath`` mount shows) joined with the rest of ``directory`` below the mount point.
    ``None`` when no line covers it. The last line wins among mounts at one point (the one stacked on top)."""
    best_point, found = "", None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        inside = directory == point or directory.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best_point):
            best_point, found = point, posixpath.join(root, posixpath.relpath(directory, point))
    return None if found is None else posixpath.normpath(found)


class MountCheck:
    """The L2 directory must be what its mount shows: kvtiers mounts each endpoint's directory ``<owner>/<namespace>``
    of the claim at ``<volume path>/<owner>/<namespace>`` (a ``subPath``), so the path inside the file system ends in
    the same two components as the mount point. After a FUSE restart a ``subPath`` bind can show the claim's root
    instead (seaweedfs-csi-driver#271), where chunks of another model or format could be read: then the L2 counts as
    absent (misses, no writes) until the mount is right again. Checked at most every :data:`MOUNT_CHECK_SECONDS`."""

    def __init__(
        self,
        directory: str,
        metrics: GuardMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        read_mountinfo: Callable[[], str] = lambda: _read_text("/proc/self/mountinfo"),
    ) -> None:
        self._directory = posixpath.normpath(directory)
        self._expected = posixpath.join(*self._directory.split("/")[-2:])
        self._metrics = metrics
        self._clock = clock
        self._read = read_mountinfo
        self._checked_at = -math.inf
        self._ok = True

    @property
    def ok(self) -> bool:
        now = self._clock()
        if now - self._checked_at >= MOUNT_CHECK_SECONDS:
            self._checked_at = now
            try:
                shown = path_in_file_system(self._directory, self._read())
            except OSError:
                shown = None
            ok = shown is not None and (shown == "/" + self._expected or shown.endswith("/" + self._expected))
            if not ok:
                self._metrics.wrong_mounts.inc()
                if self._ok:
                    logger.warning(
                        "%s: %s shows %s of its file system, not .../%s: the L2 counts as absent until it does",
                        LOG_PREFIX,
                        self._directory,
                        shown,
                        self._expected,
                    )
            self._ok = ok
        return self._ok


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


class Breaker:
    """Treats the L2 as absent for ``cooldown_seconds`` after a call timed out, and while ``mount`` is not right."""

    def __init__(
        self,
        cooldown_seconds: float,
        metrics: GuardMetrics,
        clock: Callable[[], float] = time.monotonic,
        mount: MountCheck | None = None,
    ):
        self._cooldown = cooldown_seconds
        self._metrics = metrics
        self._clock = clock
        self._open_until = -math.inf
        self._mount = mount

    @property
    def open(self) -> bool:
        return self._clock() < self._open_until or (self._mount is not None and not self._mount.ok)

    def trip(self) -> None:
        if not self.open:
            self._metrics.breaker_trips.inc()
            logger.warning("%s: the L2 counts as absent for %gs after a call timed out", LOG_PREFIX, self._cooldown)
        self._open_until = self._clock() + self._cooldown


def inspect_chunk_file(path: str) -> tuple[str, tuple[int, int] | None]:
    """Read a chunk file whole and say whether it is intact (one of the verdict constants above), with the identity
    (device, inode) of the file read, so that a deletion can check it still is the same file.

    The layout is LMCache 0.3.11's fs connector's: a ``RemoteMetadata`` header of ``METADATA_BYTES_LEN`` bytes
    (data length, memory format, dtype, a 4-dimensional shape), then the data."""
    from lmcache.v1.protocol import RemoteMetadata
    from lmcache.v1.storage_backend.connector.fs_connector import METADATA_BYTES_LEN

    data_bytes = 0
    identity = None
    try:
        with open(path, "rb") as chunk_file:
            stat = os.fstat(chunk_file.fileno())
            identity = (stat.st_dev, stat.st_ino)
            header = chunk_file.read(METADATA_BYTES_LEN)
            if len(header) < METADATA_BYTES_LEN:
                return CORRUPT, identity
            try:
                metadata = RemoteMetadata.deserialize(header)
            except (KeyError, ValueError):
                return CORRUPT, identity
            while block := chunk_file.read(1 << 20):
                data_bytes += len(block)
    except FileNotFoundError:
        return MISSING, identity
    except OSError as error:
        return (UNREADABLE if error.errno in IO_ERRORS else UNAVAILABLE), identity
    declared = metadata.length
    elements = math.prod(metadata.shape)
    if declared < 0 or (elements > 0 and metadata.dtype is not None and declared != elements * metadata.dtype.itemsize):
        return CORRUPT, identity
    if data_bytes < declared:
        return TRUNCATED, identity
    return INTACT, identity  # extra bytes after the data: LMCache reads the declared length and ignores them


def delete_if_unchanged(path: str, identity: tuple[int, int] | None) -> bool:
    """Delete ``path`` only if it is still the file inspected: another engine may have renamed a good copy over it."""
    try:
        stat = os.lstat(path)
    except FileNotFoundError:
        return False
    if identity is not None and (stat.st_dev, stat.st_ino) != identity:
        return False
    os.unlink(path)
    return True


def stamp_use(path: str, now_ns: int, metrics: GuardMetrics) -> None:
    """Set the file's access time to ``now_ns`` (keeping its modification time to the nanosecond: the float
    interface would move it) when the last one is older than :data:`USE_STAMP_SECONDS`. A file that vanished is left
    alone; a stamp the file system refuses is counted by errno (the janitor would evict that file by its write time)."""
    try:
        stat = os.stat(path)
        if now_ns - stat.st_atime_ns < USE_STAMP_SECONDS * 1e9:
            return
        os.utime(path, ns=(now_ns, stat.st_mtime_ns))
    except FileNotFoundError:
        return
    except OSError as error:
        metrics.use_stamp_failures.labels(errno=errno.errorcode.get(error.errno or 0, str(error.errno))).inc()
        return
    metrics.use_stamps.inc()


class UseStamper:
    """Runs :func:`stamp_use` on one background thread, dropping stamps beyond :data:`MAX_PENDING_STAMPS`."""

    def __init__(self, metrics: GuardMetrics) -> None:
        self._metrics = metrics
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvtiers-l2-stamp")
        self._pending = 0
        self._lock = threading.Lock()

    def stamp(self, path: str) -> None:
        with self._lock:
            if self._pending >= MAX_PENDING_STAMPS:
                return
            self._pending += 1
        self._executor.submit(self._run, path, time.time_ns())

    def _run(self, path: str, now_ns: int) -> None:
        try:
            stamp_use(path, now_ns, self._metrics)
        finally:
            with self._lock:
                self._pending -= 1


class GuardedWrites:
    """Wraps the L2 connector inside LMCache's ``InstrumentedRemoteConnector`` (so LMCache still counts what it writes
    and releases a skipped write's buffer): no writes while the L2 counts absent, and a bound on each write."""

    def __init__(self, inner: Any, *, breaker: Breaker, metrics: GuardMetrics) -> None:
        self._inner = inner
        self._breaker = breaker
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put(self, key: Any, memory_obj: Any) -> None:
        if self._breaker.open:
            self._metrics.skipped_writes.inc()
            return
        try:
            await asyncio.wait_for(self._inner.put(key, memory_obj), WRITE_TIMEOUT_SECONDS)
        except TimeoutError:
            self._metrics.timeouts.labels(call="write").inc()
            logger.warning("%s: write of %s exceeded %gs, abandoned", LOG_PREFIX, key, WRITE_TIMEOUT_SECONDS)


class BoundedRemote:
    """The remote backend's existence check and reads, bounded from the caller's side.

    LMCache runs each L2 call as a coroutine on its own event loop and waits for the result. Waiting with a bound on
    the caller's side never waits for a cancellation (a cancelled file read in aiofiles waits for the read it
    cancels); a read still running at the bound finishes in its own thread, and its buffer is released then."""

    def __init__(self, remote: Any, *, timeout_seconds: float, breaker: Breaker, metrics: GuardMetrics) -> None:
        self._remote = remote
        self._timeout = timeout_seconds
        self._breaker = breaker
        self._metrics = metrics
        self._inspections: set[str] = set()
        self._lock = threading.Lock()
        # Inspections read whole files: their own threads, so a hung mount cannot stall LMCache's executor further.
        self._inspector = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kvtiers-inspect")
        self._stamper = UseStamper(metrics)
        self._original_init_connection = remote.init_connection
        remote.contains = self.contains
        remote.get_blocking = self.get_blocking
        remote.batched_get_blocking = self.batched_get_blocking
        remote.init_connection = self.init_connection
        self._guard_writes()

    def _guard_writes(self) -> None:
        """Wrap the connection's connector (again after LMCache reconnects)."""
        connection = self._remote.connection
        if connection is not None and not isinstance(connection._connector, GuardedWrites):
            connection._connector = GuardedWrites(connection._connector, breaker=self._breaker, metrics=self._metrics)

    def init_connection(self) -> None:
        self._original_init_connection()
        self._guard_writes()

    def _timed_out(self, call: str) -> None:
        self._metrics.timeouts.labels(call=call).inc()
        logger.warning("%s: L2 %s exceeded %gs", LOG_PREFIX, call, self._timeout)
        self._breaker.trip()

    def contains(self, key: Any, pin: bool = False) -> bool:  # noqa: ARG002 (LMCache's signature; no pins on L2)
        remote = self._remote
        if self._breaker.open or remote.connection is None:
            return False
        future = asyncio.run_coroutine_threadsafe(remote.connection.exists(key), remote.loop)
        try:
            return bool(future.result(self._timeout))
        except concurrent.futures.TimeoutError:
            self._timed_out("exists")
        except Exception as error:  # noqa: BLE001 (as LMCache's own contains: any error is a miss)
            logger.warning("%s: L2 exists failed: %s", LOG_PREFIX, error)
        return False

    def get_blocking(self, key: Any) -> Any:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: list[Any]) -> list[Any]:
        remote = self._remote
        if self._breaker.open or remote.connection is None or remote.local_cpu_backend is None:
            return [None] * len(keys)
        futures = [asyncio.run_coroutine_threadsafe(remote.connection.get(key), remote.loop) for key in keys]
        deadline = time.monotonic() + self._timeout
        results: list[Any] = []
        for key, future in zip(keys, futures, strict=True):
            try:
                memory_obj = future.result(max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                self._metrics.load_failures.labels(reason=TIMEOUT).inc()
                future.add_done_callback(_release_late_result)
                results.append(None)
                continue
            except Exception as error:  # noqa: BLE001 (as LMCache's own reads: any error is a miss)
                logger.warning("%s: L2 read failed: %s", LOG_PREFIX, error)
                memory_obj = None
            if memory_obj is None:
                self._inspect_later(key)
            else:
                self._stamp(key)
            results.append(None if memory_obj is None else remote.deserializer.deserialize(memory_obj))
        if any(not f.done() for f in futures):
            self._timed_out("read")
        return results

    def _file_path(self, key: Any) -> str | None:
        """The chunk's file (``fs://`` connector only)."""
        file_path = getattr(self._remote.connection._connector, "_get_file_path", None)
        return None if file_path is None else str(file_path(key))

    def _stamp(self, key: Any) -> None:
        path = self._file_path(key)
        if path is not None:
            self._stamper.stamp(path)

    def _inspect_later(self, key: Any) -> None:
        path = self._file_path(key)
        if path is None:
            self._metrics.load_failures.labels(reason=UNREADABLE).inc()
            return
        with self._lock:
            if path in self._inspections:
                return
            self._inspections.add(path)
        self._inspector.submit(self._inspect, path)

    def _inspect(self, path: str) -> None:
        try:
            verdict, identity = inspect_chunk_file(path)
            self._metrics.load_failures.labels(reason=verdict).inc()
            if verdict not in BROKEN:
                logger.warning("%s: %s did not load (%s); left in place", LOG_PREFIX, path, verdict)
                return
            try:
                deleted = delete_if_unchanged(path, identity)
            except OSError as error:
                logger.error("%s: %s is %s and could not be deleted: %s", LOG_PREFIX, path, verdict, error)
                return
            if deleted:
                self._metrics.quarantined.inc()
                logger.warning("%s: deleted %s (%s); the next request stores it again", LOG_PREFIX, path, verdict)
        finally:
            with self._lock:
                self._inspections.discard(path)


def _release_late_result(future: concurrent.futures.Future[Any]) -> None:
    """A read that finished after its caller stopped waiting: nobody takes its buffer, so release it."""
    if future.cancelled() or future.exception() is not None:
        return
    memory_obj = future.result()
    if memory_obj is not None:
        memory_obj.ref_count_down()


class _RetrieveRecord(threading.local):
    """What one ``retrieve`` call on this thread read (buffers) and copied to the GPU (buffer, start, end)."""

    def __init__(self) -> None:
        self.active = False
        self.fetched: list[Any] = []
        self.copied: list[tuple[Any, int, int]] = []


def first_wanted(mask: Any, length: int) -> int:
    """The first token the caller asked for (the mask is False on the prefix vLLM already holds)."""
    if mask is None:
        return 0
    wanted = mask.nonzero()
    return int(wanted[0]) if len(wanted) > 0 else length


def copied_prefix_end(first: int, copied: list[tuple[Any, int, int]]) -> int:
    """End of the contiguous token range from ``first`` that the GPU copy covered."""
    end = first
    for start, stop in sorted((start, stop) for _, start, stop in copied):
        if start > end:
            break
        end = max(end, stop)
    return end


def guard_retrieve(engine: Any, metrics: GuardMetrics) -> None:
    """Make ``engine.retrieve`` report as loaded exactly the copied prefix and release what it read but did not
    copy. Only the engine's own instance attributes are wrapped; the classes stay LMCache's."""
    import torch

    record = _RetrieveRecord()
    storage_manager = engine.storage_manager
    gpu_connector = engine.gpu_connector
    original_retrieve = engine.retrieve
    original_batched_get = storage_manager.batched_get
    original_to_gpu = gpu_connector.batched_to_gpu

    def batched_get(keys: Any, location: Any = None) -> Any:
        memory_objs = original_batched_get(keys, location)
        if record.active and memory_objs:
            record.fetched.extend(obj for obj in memory_objs if obj is not None)
        return memory_objs

    def batched_to_gpu(memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> Any:
        if record.active:
            record.copied.extend(zip(memory_objs, starts, ends, strict=True))
        return original_to_gpu(memory_objs, starts, ends, **kwargs)

    def retrieve(tokens: Any, mask: Any = None, **kwargs: Any) -> Any:
        record.active, record.fetched, record.copied = True, [], []
        try:
            ret_mask = original_retrieve(tokens, mask, **kwargs)
        finally:
            record.active = False
        with torch.inference_mode():  # LMCache's retrieve returns an inference-mode tensor
            return _report_copied_prefix(ret_mask, mask)

    def _report_copied_prefix(ret_mask: Any, mask: Any) -> Any:
        first = first_wanted(mask, len(ret_mask))
        end = copied_prefix_end(first, record.copied)
        gaps = (~ret_mask[first:end]).nonzero()
        if len(gaps) > 0:
            end = first + int(gaps[0])
        overstated = int(ret_mask[end:].sum())
        if overstated:
            ret_mask[end:] = False
            metrics.corrected_tokens.inc(overstated)
            logger.warning(
                "%s: LMCache reported %d token(s) loaded that were not copied; vLLM recomputes from token %d",
                LOG_PREFIX,
                overstated,
                end,
            )
        copied_ids = {id(obj) for obj, _, _ in record.copied}
        leftovers = [obj for obj in record.fetched if id(obj) not in copied_ids]
        for obj in leftovers:
            obj.ref_count_down()
        if leftovers:
            metrics.released_buffers.inc(len(leftovers))
        return ret_mask

    storage_manager.batched_get = batched_get
    gpu_connector.batched_to_gpu = batched_to_gpu
    engine.retrieve = retrieve


def guard_engine(engine: Any) -> None:
    """Guard one LMCache engine (idempotent): its retrieve report and, when it has an L2, every L2 call."""
    if getattr(engine, "_kvtiers_guarded", False):
        return
    config = engine.config
    if config.enable_async_loading or config.use_layerwise:
        raise RuntimeError(
            f"{LOG_PREFIX}: enable_async_loading and use_layerwise must be false (the guard covers LMCache "
            f"{SUPPORTED_LMCACHE}'s synchronous retrieve only)"
        )
    metrics = GuardMetrics.get()
    storage_manager = engine.storage_manager
    if storage_manager is not None and engine.gpu_connector is not None:
        guard_retrieve(engine, metrics)
    remote = None if storage_manager is None else storage_manager.storage_backends.get("RemoteBackend")
    if remote is not None:
        directory = urllib.parse.urlparse(str(config.remote_url)).path
        BoundedRemote(
            remote,
            timeout_seconds=float(config.blocking_timeout_secs),
            breaker=Breaker(BREAKER_SECONDS, metrics, mount=MountCheck(directory, metrics)),
            metrics=metrics,
        )
    engine._kvtiers_guarded = True
    metrics.guarded_engines.inc()
    logger.warning(  # WARNING: the level vLLM's deployments keep; one line per engine process
        "%s: guarding LMCache engine (L2 %s)", LOG_PREFIX, "connected" if remote and remote.connection else "none yet"
    )


def install() -> None:
    """Make LMCache's engine builder guard every engine it builds. Refuses any LMCache but :data:`SUPPORTED_LMCACHE`."""
    version = importlib.metadata.version("lmcache")
    if version != SUPPORTED_LMCACHE:
        raise RuntimeError(
            f"{LOG_PREFIX}: tested with LMCache {SUPPORTED_LMCACHE} only, this engine has {version}: update "
            "kvtiers (kvtiers/catalog/versions.py) rather than run unguarded"
        )
    from lmcache.v1.cache_engine import LMCacheEngineBuilder

    if getattr(LMCacheEngineBuilder, "_kvtiers_guarded", False):
        return
    build = LMCacheEngineBuilder.get_or_create.__func__

    def get_or_create(cls: Any, *args: Any, **kwargs: Any) -> Any:
        engine = build(cls, *args, **kwargs)
        guard_engine(engine)
        return engine

    LMCacheEngineBuilder.get_or_create = classmethod(get_or_create)
    LMCacheEngineBuilder._kvtiers_guarded = True


_connector: type | None = None


def connector_class() -> type:
    """vLLM's ``LMCacheConnectorV1``, guarded. Built on first use: importing vLLM needs the engine image."""
    global _connector
    if _connector is None:
        from vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector import LMCacheConnectorV1

        class KvtiersLMCacheConnectorV1(LMCacheConnectorV1):  # type: ignore[misc]
            def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
                install()
                super().__init__(vllm_config, role, kv_cache_config)

        _connector = KvtiersLMCacheConnectorV1
    return _connector


def __getattr__(name: str) -> Any:
    """vLLM's factory takes the connector class with ``getattr(module, name)``."""
    if name == CONNECTOR_CLASS:
        return connector_class()
    raise AttributeError(name)
