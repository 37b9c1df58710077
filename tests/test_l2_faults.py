"""An L2 chunk that cannot be read must cost a recompute, never a wrong answer: LMCache's own code, at the engine
image's version, over a real L2 directory whose chunk files fail.

The drill (tests/faults/l2_fault_drill.py) runs in .venv-engine (LMCache at the engine image's version, CPU torch)
under faultfs (tests/faults/faultfs.c, LD_PRELOAD): a chunk file fails at the system-call layer as a failing L2
mount would make it fail. Only the GPU copy is a stand-in, which records what it was asked to load. Each scenario:
the writer stores four chunks, the reader's lookup finds all four, then the third chunk fails, the reader loads
(``retrieve``, as vLLM's worker does after the scheduler's lookup), and two later requests show whether the L2
recovers. It runs twice: with the L2 guard the engines ship (``kvtiers/k8s_charts/kvtiers_l2_guard.py``, taken from
what the charts render) and without, which shows what the pinned LMCache does on its own.

What vLLM does with the report: it recomputes from the first block reported not loaded (vLLM 0.12.0
``v1/core/sched/scheduler.py`` ``_update_requests_with_invalid_blocks``, checked against the wheel below), so tokens
reported loaded must have been copied, and the tokens recomputed are exactly the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvtiers.catalog.versions import L2_GUARD_LMCACHE
from kvtiers.k8s_charts import kvtiers_l2_guard
from kvtiers.k8s_charts.vllm import l2_guard_source
from tests.upstream import ENGINE, ENGINE_VENV, lmcache_source, vllm_source
from tests.waiting import HANG_BOUND_SECONDS

FAULTS = Path(__file__).parent / "faults"
TIMEOUT = 1
"""``blocking_timeout_secs`` in the drill (the charts render ``LMCACHE_L2_TIMEOUT_SECONDS``; 1 keeps the drill fast)."""
HANG = 6
"""How long faultfs stalls a hung call: long enough to tell a bounded call from one that waits for the mount on a
loaded machine (:data:`BOUNDED`)."""
BOUNDED = HANG - 1
"""A call the guard bounds returns in less: its bound (:data:`TIMEOUT`) plus seconds of a busy machine's delays; one
that waits for the mount takes at least :data:`HANG`."""
CHUNK = 256
BROKEN = ["io_error", "short_file", "corrupt_header"]
"""Faults that leave a chunk file that can never be read."""
GUARDED = [
    *BROKEN,
    "deleted_before_read",
    "io_error_after_held_prefix",
    "wrong_bytes",
    "hung_mount",
    "stalled_read",
    "hung_lookup",
]
UNGUARDED = [*BROKEN, "deleted_before_read", "hung_lookup"]


@pytest.fixture(scope="module")
def faultfs(tmp_path_factory) -> Path:
    library = tmp_path_factory.mktemp("faultfs") / "faultfs.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(library), str(FAULTS / "faultfs.c"), "-ldl"],
        check=True,
        capture_output=True,
    )
    return library


def start_drill(tmp: Path, faultfs: Path, *, guarded: bool, scenarios: list[str], **extra) -> subprocess.Popen:
    guard_dir = None
    if guarded:
        guard_dir = tmp / "guard"
        guard_dir.mkdir()
        # What the engines import: the file the ConfigMaps ship.
        (guard_dir / f"{Path(kvtiers_l2_guard.__file__).stem}.py").write_text(l2_guard_source())
    case = {
        "root": str(tmp / "l2"),
        "rules": str(tmp / "rules"),
        "guard_dir": None if guard_dir is None else str(guard_dir),
        "timeout": TIMEOUT,
        "hang_seconds": HANG,
        "scenarios": scenarios,
        **extra,
    }
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LD_PRELOAD": str(faultfs),
        "FAULTFS_RULES": case["rules"],
        "FAULTFS_HANG_SECONDS": str(HANG),
        # Reads leave access times alone, as on the Curvine FUSE mount: only the guard's stamp sets them.
        "FAULTFS_NOATIME": "1",
        "PYTHONHASHSEED": "0",
        "LMCACHE_TRACK_USAGE": "false",
    }
    return subprocess.Popen(
        [str(ENGINE_VENV / "bin" / "python"), str(FAULTS / "l2_fault_drill.py"), json.dumps(case)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(drill: subprocess.Popen) -> dict:
    out, err = drill.communicate(timeout=HANG_BOUND_SECONDS)
    assert drill.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def drills(tmp_path_factory, faultfs) -> tuple[dict, dict]:
    """Both runs at once (each takes tens of seconds, mostly LMCache's start-up)."""
    guarded = start_drill(tmp_path_factory.mktemp("guarded"), faultfs, guarded=True, scenarios=GUARDED, stamp=True)
    unguarded = start_drill(
        tmp_path_factory.mktemp("unguarded"), faultfs, guarded=False, scenarios=UNGUARDED, async_requests=5
    )
    return finish(guarded), finish(unguarded)


@pytest.fixture(scope="module")
def guarded(drills) -> dict:
    return drills[0]


@pytest.fixture(scope="module")
def unguarded(drills) -> dict:
    return drills[1]


def copied_prefix(request: dict) -> int:
    """Tokens from the first one asked for (after what vLLM holds) that the GPU received, in order without a gap."""
    first = request.get("held", 0)
    end = first
    for start, stop, _ in sorted(request["copied"]):
        if start != end:
            break
        end = stop
    return end - first


def right_values(request: dict) -> bool:
    """The drill's writer stores chunk i as the value i + 1: anything else on the GPU is another chunk's KV."""
    return all(value == start // CHUNK + 1 for start, _, value in request["copied"])


# ----------------------------------------------------------------------------------- what the pinned LMCache does


@pytest.mark.parametrize("scenario", UNGUARDED[:-1])
def test_without_the_guard_lmcache_reports_loaded_a_chunk_it_never_copied(unguarded, scenario):
    first = unguarded[scenario]["first"]
    # The third chunk (tokens 512..767) failed: LMCache copied the first chunk only, yet reports two as loaded. vLLM
    # would then compute on tokens 256..511 with whatever its GPU blocks held: a wrong answer.
    assert copied_prefix(first) == CHUNK
    assert first["reported"] == 2 * CHUNK
    assert first["leaked_buffers"] > 0


@pytest.mark.parametrize("scenario", ["short_file", "corrupt_header"])
def test_without_the_guard_a_broken_chunk_fails_every_later_request(unguarded, scenario):
    later = unguarded[scenario]["next"]
    assert unguarded[scenario]["file_after"]
    assert later["reported"] == 2 * CHUNK and copied_prefix(later) == CHUNK


def test_without_the_guard_a_hung_mount_stalls_the_lookup_for_as_long_as_it_hangs(unguarded):
    assert unguarded["hung_lookup"]["first"]["lookup_seconds"] >= HANG - 0.1


def test_asynchronous_loading_holds_the_buffers_of_every_lookup_vllm_does_not_load(unguarded):
    """Why the guard and not ``enable_async_loading``: LMCache 0.3.11's async lookup prefetches every chunk into
    L1 buffers that only a retrieve releases, and vLLM asks for no retrieve when its own prefix cache (L0) holds the
    prompt, the common case under prefix-aware routing (LMCache ``integration/vllm/vllm_v1_adapter.py``
    ``get_num_new_matched_tokens`` returns 0 when ``need_to_allocate <= 0``; the lookup already ran)."""
    held = unguarded["async_prefetch_without_load"]["buffers_held_after_each_request"]
    assert held == [4 * (i + 1) for i in range(len(held))]  # four chunks per request, never released
    adapter = lmcache_source("lmcache/integration/vllm/vllm_v1_adapter.py")
    assert "if need_to_allocate <= 0:\n            return 0" in adapter
    assert "self.lookup_client.cancel_lookup(" in adapter  # the only clean-up: for aborted requests


# ----------------------------------------------------------------------------------- with the guard


@pytest.mark.parametrize("scenario", [s for s in GUARDED if s != "wrong_bytes"])
def test_a_failed_chunk_costs_a_recompute_of_exactly_what_was_not_copied(guarded, scenario):
    first = guarded[scenario]["first"]
    assert first.get("reported_is_prefix", True)
    # Reported loaded == copied; vLLM recomputes the rest (found - reported tokens).
    assert first["reported"] == copied_prefix(first)
    # nothing at or after the failed chunk (tokens 512..) counts as loaded
    assert first.get("held", 0) + first["reported"] <= 2 * CHUNK
    assert right_values(first)
    assert first["leaked_buffers"] == 0


@pytest.mark.parametrize("scenario", BROKEN)
def test_a_chunk_that_cannot_be_read_is_deleted_and_stored_again(guarded, scenario):
    result = guarded[scenario]
    assert not result["file_after"]
    # The next request loads up to the deleted chunk, recomputes the rest and stores it; a later one loads it all.
    assert result["next"]["reported"] == copied_prefix(result["next"]) == 2 * CHUNK
    assert result["later"]["reported"] == copied_prefix(result["later"]) == 4 * CHUNK
    assert right_values(result["next"]) and right_values(result["later"])
    assert result["counters"]["kvtiers_l2_quarantined_files_total"] == 1
    reason = {"io_error": "unreadable", "short_file": "truncated", "corrupt_header": "corrupt"}[scenario]
    assert result["counters"][f'kvtiers_l2_load_failures_total{{"reason": "{reason}"}}'] == 1


def test_a_chunk_deleted_between_lookup_and_read_is_not_quarantined(guarded):
    result = guarded["deleted_before_read"]
    assert result["file_after"]  # faultfs hid it from open only: nothing for the guard to delete
    assert result["counters"]['kvtiers_l2_load_failures_total{"reason": "missing"}'] == 1
    assert "kvtiers_l2_quarantined_files_total" not in result["counters"]


def test_with_a_prefix_vllm_holds_only_the_copied_tokens_after_it_count(guarded, unguarded):
    first = guarded["io_error_after_held_prefix"]["first"]
    # vLLM holds tokens 0..255; 256..511 were read but dropped with the failed 512..767: nothing counts as loaded
    assert first["held"] == CHUNK and first["reported"] == 0 and first["reported_is_prefix"]


def test_a_stalled_read_stalls_a_request_at_most_the_bound_and_its_buffer_comes_back(guarded):
    stalled = guarded["stalled_read"]
    first = stalled["first"]
    assert first["retrieve_seconds"] < BOUNDED  # the read itself stalls HANG seconds
    assert first["reported"] == copied_prefix(first) <= 2 * CHUNK
    assert first["leaked_after_late_reads"] == 0
    assert stalled["counters"]['kvtiers_l2_timeouts_total{"call": "read"}'] == 1
    assert stalled["counters"]["kvtiers_l2_breaker_trips_total"] == 1
    assert stalled["file_after"]  # a slow file is no broken file


def test_a_hung_mount_stalls_a_request_at_most_the_bound_then_counts_as_absent(guarded):
    read = guarded["hung_mount"]
    assert read["first"]["retrieve_seconds"] < BOUNDED
    assert read["next"]["found"] == 0  # the breaker window: the L2 counts as absent, without a call
    assert read["counters"]["kvtiers_l2_breaker_trips_total"] == 1
    assert read["counters"]["kvtiers_l2_skipped_writes_total"] > 0
    assert read["later"]["reported"] == 4 * CHUNK  # after the window (a new engine here) the L2 serves again
    lookup = guarded["hung_lookup"]
    assert lookup["first"]["lookup_seconds"] < BOUNDED
    assert lookup["first"]["found"] == 2 * CHUNK  # the chunks before the hung one
    assert lookup["during_window"]["lookup_seconds"] < TIMEOUT  # no call: one would wait for its bound


def test_same_length_corruption_is_served_undetected(guarded):
    """Known and listed in docs/failure semantics: LMCache 0.3.11's chunk format carries no checksum and Curvine
    v0.4.1 checks none on its data path, so a chunk file of the right length with wrong bytes is loaded as it is.
    This test fails the day either detects it, so that the failure list is updated."""
    first = guarded["wrong_bytes"]["first"]
    assert first["reported"] == copied_prefix(first) == 4 * CHUNK
    assert not right_values(first)
    assert set(guarded["wrong_bytes"]["counters"]) == {"kvtiers_l2_guarded_engines_total"}


# ----------------------------------------------------------------------------------- the guard's contract


def test_every_guarded_engine_says_so_from_the_start(guarded):
    # three engines per scenario (writer, reader, a later reader): the counter exists before any L2 event
    assert guarded["wrong_bytes"]["counters"]["kvtiers_l2_guarded_engines_total"] == 3


def test_the_guard_supports_exactly_the_engine_images_lmcache():
    assert kvtiers_l2_guard.SUPPORTED_LMCACHE == L2_GUARD_LMCACHE == ENGINE.lmcache


def test_the_guard_refuses_another_lmcache(monkeypatch):
    monkeypatch.setattr(kvtiers_l2_guard.importlib.metadata, "version", lambda _: "0.4.7")
    with pytest.raises(RuntimeError, match="tested with LMCache 0.3.11 only, this engine has 0.4.7"):
        kvtiers_l2_guard.install()


@pytest.mark.parametrize("setting", ["enable_async_loading", "use_layerwise"])
def test_the_guard_refuses_loading_modes_it_does_not_cover(setting):
    class Config:
        enable_async_loading = False
        use_layerwise = False

    class Engine:
        config = Config()

    setattr(Engine.config, setting, True)
    with pytest.raises(RuntimeError, match="enable_async_loading and use_layerwise must be false"):
        kvtiers_l2_guard.guard_engine(Engine())


def test_vllm_loads_the_guard_by_module_path_and_class_name():
    """vLLM 0.12.0 imports ``kv_connector_module_path`` and takes ``kv_connector`` from it with ``getattr`` (the
    guard's module ``__getattr__`` answers); the guard's class subclasses vLLM's LMCache connector, whose
    constructor builds LMCache's engine through ``LMCacheEngineBuilder.get_or_create`` (where the guard hooks in)."""
    factory = vllm_source("vllm/distributed/kv_transfer/kv_connector/factory.py")
    assert "connector_module = importlib.import_module(connector_module_path)" in factory
    assert "connector_cls = getattr(connector_module, connector_name)" in factory
    connector = vllm_source("vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py")
    assert "class LMCacheConnectorV1(KVConnectorBase_V1):" in connector
    assert 'kv_cache_config: "KVCacheConfig",' in connector
    adapter = lmcache_source("lmcache/integration/vllm/vllm_v1_adapter.py")
    assert "engine = LMCacheEngineBuilder.get_or_create(" in adapter


def test_vllm_recomputes_from_the_first_block_reported_not_loaded():
    scheduler = vllm_source("vllm/v1/core/sched/scheduler.py")
    assert "# Truncate the computed tokens at the first failed block" in scheduler
    assert "request.num_computed_tokens = idx * self.block_size" in scheduler
    adapter = lmcache_source("lmcache/integration/vllm/vllm_v1_adapter.py")
    # LMCache reports as failed exactly the expected tokens its retrieve did not mark loaded
    assert "missing_mask = expected_mask_cpu & ~ret_mask_cpu" in adapter


CITATIONS = [
    # (package, file, line, what the line holds): the rows of docs/serving-contract.md "L2 read failures"
    ("lmcache", "lmcache/v1/storage_backend/connector/fs_connector.py", 196, "except Exception as e:"),
    ("lmcache", "lmcache/v1/storage_backend/connector/fs_connector.py", 197, "isinstance(e, FileNotFoundError)"),
    ("lmcache", "lmcache/v1/cache_engine.py", 1487, "ret_mask[last_failed_block_start:] = False"),
    ("lmcache", "lmcache/v1/cache_engine.py", 1492, "if end < last_failed_block_start"),
    (
        "lmcache",
        "lmcache/integration/vllm/vllm_v1_adapter.py",
        1105,
        "missing_mask = expected_mask_cpu & ~ret_mask_cpu",
    ),
    ("lmcache", "lmcache/integration/vllm/vllm_v1_adapter.py", 1572, "if need_to_allocate <= 0:"),
    ("lmcache", "lmcache/v1/storage_backend/remote_backend.py", 150, "res = future.result()"),
    ("lmcache", "lmcache/v1/storage_backend/remote_backend.py", 292, "future.result(self.blocking_timeout_secs)"),
    ("lmcache", "lmcache/v1/config.py", 335, '"blocking_timeout_secs": {"type": int, "default": 10'),
    ("lmcache", "lmcache/v1/config.py", 356, '"enable_async_loading": {'),
    ("lmcache", "lmcache/usage_context.py", 408, 'os.getenv("LMCACHE_TRACK_USAGE") == "false"'),
    ("vllm", "vllm/v1/core/sched/scheduler.py", 1661, "# Truncate the computed tokens at the first failed block"),
    ("vllm", "vllm/v1/core/sched/scheduler.py", 1718, '"Recovered from KV load failure: "'),
    ("vllm", "vllm/distributed/kv_transfer/kv_connector/factory.py", 116, "import_module(connector_module_path)"),
    ("vllm", "vllm/distributed/kv_transfer/kv_connector/factory.py", 118, "getattr(connector_module, connector_name)"),
]


@pytest.mark.parametrize("package, path, line, holds", CITATIONS, ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_the_failure_semantics_cite_the_pinned_lines(package, path, line, holds):
    text = (lmcache_source if package == "lmcache" else vllm_source)(path)
    assert holds in text.splitlines()[line - 1], f"{path}:{line} no longer holds {holds!r}"
    doc = (Path(__file__).parent.parent / "docs" / "serving-contract.md").read_text()
    rows = [row for row in doc[doc.index("## L2 read failures") :].splitlines() if f"{Path(path).name}:" in row]
    assert any(f":{line}`" in row for row in rows), f"no row of the doc cites {Path(path).name}:{line}"


def test_a_chunk_read_from_the_l2_gets_its_access_time_stamped_once_per_interval(guarded):
    """Curvine records no use of a file by itself: the guard stamps the access time the janitor evicts by."""
    stamps = guarded["use_stamps"]
    began = stamps["began"]
    first, second = stamps["after_first_reader"], stamps["after_second_reader"]
    assert all(atime >= began for atime, _ in first), first
    assert all(mtime == pytest.approx(began - 7200) for _, mtime in first + second), "mtime stays the write time"
    assert second == first, "a second read within USE_STAMP_SECONDS stamps nothing"
