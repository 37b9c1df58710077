"""The serving path against LMCache's own code, at exactly the versions of the version matrix.

Each LMCache version lives in ``.venv-lmcache-<version>`` (``make test`` installs it from PyPI without dependencies;
``tests/stubs`` supplies a stand-in ``torch`` for imports only). Two contracts:

1. The rendered LMCache files load with the engine's LMCache as the engine applies them: ``from_file``, then the
   ``LMCACHE_*`` variables of the pod (``update_config_from_env``), then ``validate``; an ``Unknown configuration
   key`` warning is a failure (LMCache only warns, so a key of another version would be ignored in production).
2. The controller messages an engine of that version sends (register, heartbeat when configured, KV admit and
   evict in the form that version's storage backends emit) are encoded with the engine's classes and decoded with
   the router's LMCache, and each decoded message must be a type the router's controller dispatches on
   (``handle_worker_message`` in its ``controller_manager.py``, read from the router's installed source).

Both fail for the old pins (engine LMCache 0.3.7 against the router's 0.3.11), which the mismatch tests show.
"""

from __future__ import annotations

import json
import os
import subprocess

import cdk8s
import pytest
import yaml

from kvtiers.catalog.versions import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE, engine_release, router_release
from kvtiers.config.schema import Environment
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import CONFIG_DIR, ROOT

STUBS = ROOT / "tests" / "stubs"
ENGINE_LMCACHE = engine_release(DEFAULT_ENGINE_IMAGE).lmcache
ROUTER_LMCACHE = router_release(DEFAULT_ROUTER_IMAGE).lmcache
OLD_ENGINE_LMCACHE = engine_release("lmcache/vllm-openai:v0.3.7").lmcache


def venv_python(version: str):
    return ROOT / f".venv-lmcache-{version}" / "bin" / "python"


def needs(*versions: str):
    missing = [v for v in versions if not venv_python(v).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"no .venv-lmcache-{missing} (make test installs them)")


def run(version: str, script: str, payload, env: dict[str, str] | None = None) -> dict:
    result = subprocess.run(
        [str(venv_python(version)), "-c", script, json.dumps(payload)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(STUBS), **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


LOADER = r"""
import json, logging, os, sys
case = json.loads(sys.argv[1])

class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []
    def emit(self, record):
        self.messages.append(record.getMessage())

collect = Collect()
from lmcache.v1.config import LMCacheEngineConfig
for name in list(logging.root.manager.loggerDict):
    if name == "lmcache" or name.startswith("lmcache."):
        logging.getLogger(name).addHandler(collect)  # lmcache loggers do not propagate
# The engine's order (lmcache/integration/vllm/utils.py, lmcache_get_or_create_config): file, then LMCACHE_* env.
cfg = LMCacheEngineConfig.from_file(case["path"])
cfg.update_config_from_env()
cfg.validate()
got = {key: getattr(cfg, key, "<missing>") for key in case["expect"]}
print(json.dumps({"got": got, "unknown": [m for m in collect.messages if "Unknown configuration key" in m]}))
"""


def load_as_engine(version: str, text: str, pod_env: dict[str, str], tmp_path, expect: list[str]) -> dict:
    path = tmp_path / "lmcache.yaml"
    path.write_text(text)
    return run(version, LOADER, {"path": str(path), "expect": expect}, env=pod_env)


def rendered_lmcache(env: Environment, endpoint: str, pod_name: str) -> tuple[str, dict[str, str]]:
    """The engine's LMCache file and its per-pod ``LMCACHE_*`` variables as the chart renders them, with the pod name
    Kubernetes substitutes for ``$(POD_NAME)``."""
    objs = wiring.serving_chart(cdk8s.App(), endpoint, env, endpoint).to_json()
    text = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["lmcache.yaml"]
    engine = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == f"{endpoint}-engine")
    container = engine["spec"]["template"]["spec"]["containers"][0]
    pod_env = {
        e["name"]: e["value"].replace("$(POD_NAME)", pod_name)
        for e in container["env"]
        if e["name"].startswith("LMCACHE_") and e["name"] != "LMCACHE_CONFIG_FILE"
    }
    return text, pod_env


def kvaware_env() -> Environment:
    raw = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    second = {**raw["serving"]["endpoints"][0], "name": "kv", "routing": "kvaware", "api": "completions"}
    second.update(tensor_parallel_size=2, l1_gib=20, l2="on")
    raw["serving"]["endpoints"].append(second)
    return Environment.model_validate(raw)


@needs(ENGINE_LMCACHE)
@pytest.mark.parametrize("endpoint", ["qwen2-7b", "kv"])
def test_the_engines_lmcache_loads_the_rendered_config_as_the_engine_does(endpoint, tmp_path):
    text, pod_env = rendered_lmcache(kvaware_env(), endpoint, pod_name="kv-engine-abc12")
    rendered = yaml.safe_load(text)
    report = load_as_engine(ENGINE_LMCACHE, text, pod_env, tmp_path, [*rendered, "lmcache_instance_id", "extra_config"])
    assert report["unknown"] == []
    got = report["got"]
    assert {k: got[k] for k in rendered} == rendered
    assert got["extra_config"] == {"fs_connector_relative_tmp_dir": "tmp-kv-engine-abc12"}
    if endpoint == "kv":
        assert got["lmcache_instance_id"] == "kv-engine-abc12"
        assert got["lmcache_worker_heartbeat_time"] > 0


@needs(OLD_ENGINE_LMCACHE)
def test_a_key_the_engine_version_does_not_know_is_caught(tmp_path):
    # save_unfull_chunk exists in 0.3.7 too; a made-up key stands for "a key of another LMCache version".
    report = load_as_engine(OLD_ENGINE_LMCACHE, "chunk_size: 256\nnot_a_0_3_7_key: 1\n", {}, tmp_path, ["chunk_size"])
    assert report["unknown"] and "not_a_0_3_7_key" in report["unknown"][0]


ENGINE_SENDS = r"""
import base64, json, pathlib, sys
import msgspec
import lmcache
case = json.loads(sys.argv[1])
from lmcache.v1.cache_controller import message as m
from lmcache.v1.config import LMCacheEngineConfig
cfg = LMCacheEngineConfig.from_file(case["path"])

def register_fields():
    fields = dict(instance_id="pod-a", worker_id=0, ip="10.0.0.7", port=cfg.lmcache_worker_ports[0])
    # RegisterMsg's last field is the peer URL, named per version (distributed_url / peer_init_url)
    extra = [f for f in m.RegisterMsg.__struct_fields__ if f not in fields]
    return {**fields, **{f: None for f in extra}}

msgs = [("register", m.RegisterMsg(**register_fields()))]
if cfg.lmcache_worker_heartbeat_time:  # lmcache/v1/cache_controller/worker.py heartbeat(): only when set
    msgs.append(("heartbeat", m.HeartbeatMsg(**register_fields())))
# KV admits/evicts as the version's storage backends emit them: batched where the version has the batched sender
# (lmcache/v1/storage_backend/batched_message_sender.py), single KVAdmitMsg/KVEvictMsg otherwise.
if (pathlib.Path(lmcache.__file__).parent / "v1" / "storage_backend" / "batched_message_sender.py").exists():
    ops = [m.KVOpEvent(op_type=m.OpType.ADMIT, key=11, seq_num=0), m.KVOpEvent(op_type=m.OpType.EVICT, key=11, seq_num=1)]
    msgs.append(("admit+evict", m.BatchedKVOperationMsg(instance_id="pod-a", worker_id=0, location="LocalCPUBackend", operations=ops)))
else:
    msgs.append(("admit", m.KVAdmitMsg("pod-a", 0, 11, "LocalCPUBackend")))
    msgs.append(("evict", m.KVEvictMsg("pod-a", 0, 11, "LocalCPUBackend")))
print(json.dumps([[name, base64.b64encode(msgspec.msgpack.encode(x)).decode()] for name, x in msgs]))
"""

ROUTER_RECEIVES = r"""
import ast, base64, json, pathlib, sys
import msgspec
import lmcache
from lmcache.v1.cache_controller import message as m
# The message types the router's controller acts on, read from its own source.
source = pathlib.Path(lmcache.__file__).parent / "v1" / "cache_controller" / "controller_manager.py"
tree = ast.parse(source.read_text())
handler = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "handle_worker_message")
handled = {c.args[1].id for c in ast.walk(handler)
           if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "isinstance" and isinstance(c.args[1], ast.Name)}
out = {}
for name, data in json.loads(sys.argv[1]):
    try:
        msg = msgspec.msgpack.decode(base64.b64decode(data), type=m.Msg)
    except Exception as exc:  # the router's receive loop dies on this (controller_manager.py)
        out[name] = f"decode error: {exc}"
        continue
    out[name] = type(msg).__name__ if type(msg).__name__ in handled else f"ignored: {type(msg).__name__}"
print(json.dumps(out))
"""


def exchange(engine: str, router: str, tmp_path) -> dict:
    text, _ = rendered_lmcache(kvaware_env(), "kv", pod_name="kv-engine-abc12")
    path = tmp_path / "kv.yaml"
    path.write_text(text)
    sent = run(engine, ENGINE_SENDS, {"path": str(path)})
    return run(router, ROUTER_RECEIVES, sent)


@needs(ENGINE_LMCACHE, ROUTER_LMCACHE)
def test_the_router_controller_decodes_and_handles_what_the_pinned_engines_send(tmp_path):
    received = exchange(ENGINE_LMCACHE, ROUTER_LMCACHE, tmp_path)
    assert set(received) == {"register", "heartbeat", "admit+evict"}, received
    assert received == {"register": "RegisterMsg", "heartbeat": "HeartbeatMsg", "admit+evict": "BatchedKVOperationMsg"}


@needs(OLD_ENGINE_LMCACHE, ROUTER_LMCACHE)
def test_the_old_pins_fail_the_same_contract(tmp_path):
    """LMCache 0.3.7 engines against the 0.3.11 router: registration does not decode, KV admits are ignored."""
    received = exchange(OLD_ENGINE_LMCACHE, ROUTER_LMCACHE, tmp_path)
    assert received["register"].startswith("decode error") and "peer_init_url" in received["register"]
    assert received["admit"].startswith("ignored") and received["evict"].startswith("ignored")
