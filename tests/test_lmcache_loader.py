"""The rendered LMCache files, read by LMCache's own loader (lmcache 0.5.6 in a separate light venv).

Skipped unless ``.venv-lmcache`` exists (``make lmcache-venv``). LMCache only warns on an unknown key, so the
script fails on any ``Unknown configuration key`` record from the ``lmcache`` loggers.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import cdk8s
import pytest
import yaml

from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.serving import ServingChart, ServingProps
from kvtiers.k8s_charts.serving.props import LMCACHE_CONFIG_KEY
from tests.conftest import CONFIG_DIR, ROOT

LMCACHE_PYTHON = ROOT / ".venv-lmcache" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")

pytestmark = pytest.mark.skipif(
    not LMCACHE_PYTHON.exists(), reason="no .venv-lmcache (make lmcache-venv installs lmcache 0.5.6 there)"
)

SCRIPT = r"""
import json, logging, os, sys

cases = json.loads(sys.argv[1])
from lmcache.v1.config import LMCacheEngineConfig, load_engine_config_with_overrides

class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []
    def emit(self, record):
        self.messages.append(record.getMessage())

collect = Collect()
for name in list(logging.root.manager.loggerDict):
    if name == "lmcache" or name.startswith("lmcache."):
        logging.getLogger(name).addHandler(collect)  # lmcache loggers do not propagate
logging.getLogger("lmcache").addHandler(collect)

problems = []
for case in cases:
    cfg = LMCacheEngineConfig.from_file(case["path"])
    cfg.validate()
    for key, want in case["expect"].items():
        got = getattr(cfg, key)
        if got != want:
            problems.append(f"{case['path']}: {key} = {got!r}, expected {want!r}")
    if case.get("instance_env"):
        # The engine's path: file first, then LMCACHE_* variables (only the per-pod instance id is one).
        os.environ["LMCACHE_LMCACHE_INSTANCE_ID"] = "pod-abc"
        loaded = load_engine_config_with_overrides(config_file_path=case["path"])
        del os.environ["LMCACHE_LMCACHE_INSTANCE_ID"]
        if loaded.lmcache_instance_id != "pod-abc":
            problems.append(f"{case['path']}: instance id from env ignored: {loaded.lmcache_instance_id!r}")
unknown = [m for m in collect.messages if "Unknown configuration key" in m]
print(json.dumps({"problems": problems, "unknown": unknown}))
"""


def rendered(env: Environment, endpoint: str) -> str:
    chart = ServingChart(cdk8s.App(), endpoint, props=ServingProps.from_environment(env, endpoint))
    return next(o for o in chart.to_json() if o["kind"] == "ConfigMap")["data"][LMCACHE_CONFIG_KEY]


def test_lmcache_loads_the_rendered_configs(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    second = copy.deepcopy(raw["serving"]["endpoints"][0])
    second.update(name="kv", routing="kvaware", l2="off", tensor_parallel_size=2, l1_gib=20)
    raw["serving"]["endpoints"].append(second)
    env = Environment.model_validate(raw)
    cases = []
    for endpoint in ("qwen2-7b", "kv"):
        path = tmp_path / f"{endpoint}.yaml"
        path.write_text(rendered(env, endpoint))
        sizing = env.sizing.endpoint(endpoint)
        expect = {
            "chunk_size": 256,
            "local_cpu": True,
            "max_local_cpu_size": sizing.l1_bytes / sizing.gpus_per_replica / 1024**3,
            "remote_url": "fs://localhost:0/mnt/curvine/l2cache/" if sizing.l2_enabled else None,
            "remote_serde": "naive",
        }
        if endpoint == "kv":
            expect |= {"enable_controller": True, "lmcache_worker_ports": [8001, 8002]}
        cases.append({"path": str(path), "expect": expect, "instance_env": endpoint == "kv"})
    result = subprocess.run(
        [str(LMCACHE_PYTHON), "-c", SCRIPT, json.dumps(cases)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["unknown"] == [], report["unknown"]
    assert report["problems"] == [], report["problems"]
