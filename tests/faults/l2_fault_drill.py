"""Run LMCache's own store, lookup and retrieve over a real L2 directory while a chunk file fails, and report what
the GPU received, what LMCache reported loaded, and what happened to the file and the buffers.

Runs in the engine test venv (.venv-engine: LMCache at the engine image's version, CPU torch) under the faultfs
LD_PRELOAD layer (faultfs.c), as ``python l2_fault_drill.py '<json>'``; prints one JSON line. Only the GPU copy is
replaced (``RecordingGPU``): it writes a known value per chunk on store and records each chunk it is asked to load.
Everything else is LMCache's code: the fs connector, the remote backend, the storage manager and the cache engine.

Input: {"root": dir, "rules": faultfs rules file, "guard_dir": dir of kvtiers_l2_guard.py or null, "timeout": secs,
"scenarios": [names]}.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from lmcache.config import LMCacheEngineMetadata
from lmcache.v1.cache_engine import LMCacheEngineBuilder
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.mock_gpu_connector import MockGPUConnector
from lmcache.v1.storage_backend.connector.fs_connector import METADATA_BYTES_LEN

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the drill runs as a script in its own venv
from waiting import NeverHappened, until

CHUNK = 256
CHUNKS = 4
FAILING = 2
"""The chunk that fails: a middle one, with loaded chunks before it and a chunk after it."""
KV_SHAPE = (2, 2, CHUNK, 2, 16)
"""(layers, K/V, tokens, heads, head size): small, so that every chunk file is 131,100 bytes."""


class RecordingGPU(MockGPUConnector):
    """Stands in for vLLM's paged GPU memory: store fills chunk i with the value i + 1, load records what arrived."""

    def __init__(self) -> None:
        super().__init__(KV_SHAPE)
        self.loaded: list[tuple[int, int, float]] = []

    def get_shape(self, num_tokens=None):
        layers, _, _, heads, head_size = KV_SHAPE
        return (2, layers, CHUNK if num_tokens is None else num_tokens, heads * head_size)

    def batched_from_gpu(self, memory_objs, starts, ends, **kwargs):
        for memory_obj, start, _ in zip(memory_objs, starts, ends, strict=True):
            memory_obj.tensor.fill_(float(start // CHUNK + 1))

    def batched_to_gpu(self, memory_objs, starts, ends, **kwargs):
        for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
            values = memory_obj.tensor.flatten()
            uniform = bool((values == values[0]).all())
            self.loaded.append((int(start), int(end), float(values[0]) if uniform else -1.0))


def engine(name: str, root: str, timeout: int, **settings):
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=True,
        max_local_cpu_size=0.05,
        remote_url=f"fs://localhost:0{root}/",
        remote_serde="naive",
        save_unfull_chunk=False,
        blocking_timeout_secs=timeout,
        **settings,
    )
    metadata = LMCacheEngineMetadata(
        model_name="drill", world_size=1, worker_id=0, fmt="vllm", kv_dtype=torch.float32, kv_shape=KV_SHAPE
    )
    gpu = RecordingGPU()
    built = LMCacheEngineBuilder.get_or_create(name, config, metadata, gpu, lambda t, r: None, lambda o, r: o)
    return built, gpu


def chunk_path(built, root: str, tokens, index: int) -> str:
    keys = [key for _, _, key in built.token_database.process_tokens(tokens=tokens)]
    return os.path.join(root, keys[index].to_string().replace("/", "-SEP-") + ".data")


def active_buffers(built) -> int:
    allocator = built.storage_manager.allocator_backend.memory_allocator
    return allocator.pin_allocator.num_active_allocations


def wait_for_files(root: str, count: int) -> None:
    def stored() -> list[str]:
        return [n for n in os.listdir(root) if n.endswith(".data")]

    until(lambda: len(stored()) >= count, what=f"the writer stores {count} chunk files in {root}", seen=stored)


def guard_of(built) -> object:
    """The guard of an engine's L2 (``BoundedRemote``: its methods replace the remote backend's)."""
    return built.storage_manager.storage_backends["RemoteBackend"].get_blocking.__self__


def inspections_done(built) -> None:
    """Until the guard has finished inspecting every file that failed to load (its verdict counted, a broken file
    deleted): it does that on its own threads after the request returned."""
    guard = guard_of(built)
    until(lambda: not guard._inspections, what="the guard's inspections", seen=lambda: guard._inspections)


def request(built, gpu, tokens) -> dict:
    """One vLLM request as the LMCache connector drives it: the scheduler's lookup, then the worker's retrieve of
    the tokens the lookup found, with nothing in vLLM's own prefix cache."""
    gpu.loaded.clear()
    began = time.monotonic()
    found = built.lookup(tokens, lookup_id="drill", pin=True)
    looked_up = time.monotonic()
    before = active_buffers(built)
    reported = 0
    if found:
        mask = torch.ones(found, dtype=torch.bool)
        ret_mask = built.retrieve(
            tokens[:found],
            mask,
            kvcaches=[],
            slot_mapping=torch.arange(found),
            req_id="drill",
            skip_contains_check=True,
        )
        reported = [int(i) for i in ret_mask.nonzero().flatten()]
        assert reported == list(range(len(reported))), "the reported tokens are not a prefix"
        reported = len(reported)
    built.lookup_unpin("drill")
    return {
        "found": int(found),
        "reported": reported,
        "copied": [list(c) for c in gpu.loaded],
        "leaked_buffers": active_buffers(built) - before,
        "lookup_seconds": round(looked_up - began, 3),
        "retrieve_seconds": round(time.monotonic() - looked_up, 3),
    }


def inject(scenario: str, path: str, rules: str) -> None:
    if scenario == "io_error":
        write_rules(rules, f"eio {path}")
    elif scenario == "deleted_before_read":
        write_rules(rules, f"gone {path}")
    elif scenario == "short_file":
        with open(path, "r+b") as f:
            f.truncate(METADATA_BYTES_LEN + 1000)
    elif scenario == "corrupt_header":
        with open(path, "r+b") as f:
            f.write(b"\xff" * METADATA_BYTES_LEN)
    elif scenario == "wrong_bytes":
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.seek(METADATA_BYTES_LEN)
            f.write(b"\x00" * (size - METADATA_BYTES_LEN))
    elif scenario in ("hung_mount", "hung_lookup"):
        write_rules(rules, f"hang {path}")
    elif scenario == "stalled_read":
        write_rules(rules, f"stall {path}")
    elif scenario == "io_error_after_held_prefix":
        write_rules(rules, f"eio {path}")
    else:
        raise ValueError(scenario)


def write_rules(rules: str, text: str) -> None:
    with open(rules, "w") as f:
        f.write(text + "\n")


def drill(scenario: str, case: dict, index: int) -> dict:
    root = os.path.join(case["root"], scenario)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    write_rules(case["rules"], "")
    tokens = torch.arange(CHUNKS * CHUNK) + index * 100_000
    writer, _ = engine(f"writer-{scenario}", root, case["timeout"])
    writer.store(tokens, kvcaches=[], slot_mapping=torch.arange(len(tokens)))
    wait_for_files(root, CHUNKS)
    reader, gpu = engine(f"reader-{scenario}", root, case["timeout"])
    path = chunk_path(reader, root, tokens, FAILING)
    result: dict = {"scenario": scenario}
    if scenario == "hung_lookup":
        inject(scenario, path, case["rules"])
        result["first"] = request(reader, gpu, tokens)
        result["during_window"] = request(reader, gpu, tokens)
    else:
        found = reader.lookup(tokens, lookup_id="drill", pin=True)
        reader.lookup_unpin("drill")
        assert found == CHUNKS * CHUNK, found
        inject(scenario, path, case["rules"])
        # The lookup above found every chunk; now the engine loads them, as vLLM's worker does after the scheduler's
        # lookup (vLLM's own prefix cache holding the first chunk in one scenario).
        held = CHUNK if scenario == "io_error_after_held_prefix" else 0
        result["first"] = retrieve_after_lookup(reader, gpu, tokens, held=held)
        if scenario == "stalled_read":
            # The stalled read finishes after the request gave up on it: the fs connector reads the header (one
            # stall), takes a buffer, reads the data (another stall) and then the buffer must come back. Each stall
            # lasts seconds, so polling sees the buffer taken; a leak never returns it: the wait reaches its hang
            # bound and the drill reports what is still held.
            before = result["first"]["buffers_before"]
            try:
                until(lambda: active_buffers(reader) > before, what="the late read takes its buffer")
                until(lambda: active_buffers(reader) <= before, what="the late read's buffer comes back")
            except NeverHappened:
                pass
            result["first"]["leaked_after_late_reads"] = active_buffers(reader) - before
    if case["guard_dir"]:
        inspections_done(reader)
    result["file_after"] = os.path.exists(path)
    write_rules(case["rules"], "")
    # The next request: it recomputes what it could not load and stores the request's chunks, as vLLM's save does.
    if scenario != "hung_lookup":
        result["next"] = request(reader, gpu, tokens)
        reader.store(tokens, kvcaches=[], slot_mapping=torch.arange(len(tokens)))
        wait_for_files(root, CHUNKS)  # a deleted chunk is stored again
        fresh, fresh_gpu = engine(f"later-{scenario}", root, case["timeout"])
        result["later"] = request(fresh, fresh_gpu, tokens)
    return result


def retrieve_after_lookup(built, gpu, tokens, *, held: int = 0) -> dict:
    """``held``: tokens vLLM's own prefix cache already holds (the mask is False on them)."""
    gpu.loaded.clear()
    found = len(tokens)
    before = active_buffers(built)
    began = time.monotonic()
    mask = torch.ones(found, dtype=torch.bool)
    mask[:held] = False
    ret_mask = built.retrieve(
        tokens,
        mask,
        kvcaches=[],
        slot_mapping=torch.arange(found),
        req_id="drill",
        skip_contains_check=True,
    )
    elapsed = time.monotonic() - began
    reported = [int(i) for i in ret_mask.nonzero().flatten()]
    return {
        "found": found,
        "held": held,
        "reported": len(reported),
        "reported_is_prefix": reported == list(range(held, held + len(reported))),
        "copied": [list(c) for c in gpu.loaded],
        "buffers_before": before,
        "leaked_buffers": active_buffers(built) - before,
        "retrieve_seconds": round(elapsed, 3),
    }


class SchedulerSide:
    """Receives the worker's prefetch results as LMCache's async lookup server would send them to vLLM's scheduler
    (over ZMQ in the engine; here a direct call)."""

    def __init__(self) -> None:
        self.hit_tokens: dict[str, int] = {}

    def send_response_to_scheduler(self, lookup_id: str, num_hit_tokens: int) -> None:
        self.hit_tokens[lookup_id] = num_hit_tokens


def async_prefetch_without_load(case: dict) -> dict:
    """LMCache's asynchronous loading (``enable_async_loading``): the lookup prefetches every chunk it finds into L1
    buffers, which only the worker's retrieve releases. When vLLM's own prefix cache already holds the prompt, the
    scheduler loads nothing (LMCache's ``get_num_new_matched_tokens`` returns 0) and no retrieve comes."""
    root = os.path.join(case["root"], "async")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    tokens = torch.arange(CHUNKS * CHUNK) + 900_000
    writer, _ = engine("writer-async", root, case["timeout"])
    writer.store(tokens, kvcaches=[], slot_mapping=torch.arange(len(tokens)))
    wait_for_files(root, CHUNKS)
    reader, _ = engine("reader-async", root, case["timeout"], enable_async_loading=True)
    scheduler = SchedulerSide()
    reader.post_init(async_lookup_server=scheduler, kvcaches=[])
    hashes, offsets = [], []
    for start, end, chunk_hash in reader.token_database.process_tokens(tokens, make_key=False):
        hashes.append(chunk_hash)
        offsets.append(end - start)
    held = []
    for request in range(case.get("async_requests", 5)):
        lookup_id = f"repeat-{request}"
        reader.async_lookup_and_prefetch(lookup_id=lookup_id, hashes=hashes, offsets=offsets, pin=True)
        until(lambda lookup_id=lookup_id: lookup_id in scheduler.hit_tokens, what=f"the lookup {lookup_id}", poll=0.01)
        held.append(active_buffers(reader))
    return {"hit_tokens": list(scheduler.hit_tokens.values()), "buffers_held_after_each_request": held}


def use_stamps(case: dict) -> dict:
    """A chunk read from the L2 gets its access time stamped (the janitor evicts by it), once per interval: a second
    reader within the interval leaves it; the modification time never changes."""
    root = os.path.join(case["root"], "stamps")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    tokens = torch.arange(CHUNKS * CHUNK) + 800_000
    writer, _ = engine("writer-stamps", root, case["timeout"])
    writer.store(tokens, kvcaches=[], slot_mapping=torch.arange(len(tokens)))
    wait_for_files(root, CHUNKS)
    paths = sorted(os.path.join(root, n) for n in os.listdir(root) if n.endswith(".data"))
    began = time.time()
    # Written two hours ago, last used one hour ago.
    for path in paths:
        os.utime(path, (began - 3600, began - 7200))

    def times() -> list[list[float]]:
        return [[os.stat(p).st_atime, os.stat(p).st_mtime] for p in paths]

    def read(name: str) -> list[list[float]]:
        reader, gpu = engine(name, root, case["timeout"])
        request(reader, gpu, tokens)
        stamper = guard_of(reader)._stamper  # the request queued its stamps before it returned
        until(lambda: stamper._pending == 0, what="the queued stamps", seen=times)
        return times()

    return {"began": began, "after_first_reader": read("stamp-reader-1"), "after_second_reader": read("stamp-reader-2")}


def guard_counters() -> dict:
    from prometheus_client import REGISTRY

    return {
        f"{s.name}{json.dumps(s.labels, sort_keys=True) if s.labels else ''}": s.value
        for metric in REGISTRY.collect()
        if metric.name.startswith("kvtiers_l2")
        for s in metric.samples
        if s.name.endswith("_total")
    }


def main() -> None:
    case = json.loads(sys.argv[1])
    if case["guard_dir"]:
        sys.path.insert(0, case["guard_dir"])
        import kvtiers_l2_guard

        kvtiers_l2_guard.install()
        kvtiers_l2_guard.BREAKER_SECONDS = case.get("breaker_seconds", kvtiers_l2_guard.BREAKER_SECONDS)
    results = {}
    if case.get("async_requests"):
        results["async_prefetch_without_load"] = async_prefetch_without_load(case)
    if case.get("stamp"):
        results["use_stamps"] = use_stamps(case)
    for index, scenario in enumerate(case["scenarios"]):
        counters_before = guard_counters() if case["guard_dir"] else {}
        result = drill(scenario, case, index)
        if case["guard_dir"]:
            after = guard_counters()
            result["counters"] = {
                k: v - counters_before.get(k, 0) for k, v in after.items() if v != counters_before.get(k, 0)
            }
        results[scenario] = result
    print(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)  # LMCache's engines keep non-daemon threads


if __name__ == "__main__":
    main()
