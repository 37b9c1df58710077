"""Tensor x pipeline parallelism: the layout is an engine setting that reaches vLLM, the GPU requests, the LMCache
ranks and the L2 namespace; synth and ``kvtiers plan`` advise stages over a PCIe-wide all-reduce on G6e, as the
pinned vLLM's own code and documentation do."""

from __future__ import annotations

import copy

import cdk8s
import pytest
import yaml

from kvtiers.config import Environment, model
from kvtiers.k8s_charts.l2 import L2Volume
from kvtiers.k8s_charts.serving import Engine, Router, S3Weights, ServingChart
from kvtiers.parallelism import PCIE_TENSOR_PARALLEL_LIMIT, layout_advice
from tests.conftest import CONFIG_DIR
from tests.upstream import lmcache_source, vllm_source

LLAMA_70B: dict = {
    "model": "meta-llama/Llama-3.1-70B-Instruct",
    "weights": S3Weights(bucket="models", prefix="llama-70b"),
    "instance_group": "g6e-large",
    "replicas": 1,
    "l1_gib": 8,
}


def engine_objects(engine: Engine) -> tuple[dict, dict]:
    chart = ServingChart(
        cdk8s.App(),
        "e",
        name="llama",
        namespace="serving",
        engine=engine,
        router=Router(routing="kvaware"),
        hash_seed="42",
        l2=L2Volume(claim_name="curvine-l2", mount_path="/mnt/curvine/l2cache"),
    )
    objects = chart.to_json()
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-engine"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "llama-lmcache"]
    return deployment["spec"]["template"]["spec"]["containers"][0], config


def test_a_pipeline_parallel_engine_asks_for_every_stages_gpus_and_tells_vllm():
    container, config = engine_objects(Engine(**LLAMA_70B, tensor_parallel_size=2, pipeline_parallel_size=4))
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 8
    args = container["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--pipeline-parallel-size") + 1] == "4"
    # kvaware: one LMCache worker port per rank of the world (8), as the drain hook deregisters them.
    assert [p["name"] for p in container["ports"] if p["name"].startswith("lmc-worker")] == [
        f"lmc-worker-{i}" for i in range(8)
    ]
    prestop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop[prestop.index("--worker-ports") + 1] == ",".join(str(8001 + i) for i in range(8))
    assert "lmcache_worker_ports" in config["data"]["lmcache.yaml"]


def test_one_stage_passes_no_pipeline_flag():
    container, _ = engine_objects(Engine(**LLAMA_70B, tensor_parallel_size=8))
    assert "--pipeline-parallel-size" not in container["args"]


def test_two_layouts_of_one_gpu_count_never_share_an_l2_directory():
    """LMCache 0.3.11 keys a chunk by world size and rank only: without the layout in the namespace, TP 8 and
    TP 2 x PP 4 would read each other's chunks (other layers and heads under the same key) as their own."""
    wide = Engine(**LLAMA_70B, tensor_parallel_size=8).l2_namespace("42")
    staged = Engine(**LLAMA_70B, tensor_parallel_size=2, pipeline_parallel_size=4).l2_namespace("42")
    assert wide.directory != staged.directory
    key = lmcache_source("lmcache/utils.py")
    fields = key[key.index("class CacheEngineKey") :].split("def ", 1)[0]
    assert "world_size: int" in fields and "worker_id: int" in fields
    assert "pipeline" not in fields and "tp_rank" not in fields
    adapter = lmcache_source("lmcache/integration/vllm/vllm_v1_adapter.py")
    assert "parallel_config.world_size,\n        parallel_config.rank," in adapter


def test_the_pinned_vllm_turns_its_all_reduce_off_above_two_pcie_gpus_and_takes_pipeline_stages():
    all_reduce = vllm_source("vllm/distributed/device_communicators/custom_all_reduce.py")
    assert f"if world_size > {PCIE_TENSOR_PARALLEL_LIMIT} and not fully_connected:" in all_reduce
    assert '"--pipeline-parallel-size",' in vllm_source("vllm/engine/arg_utils.py")


@pytest.mark.parametrize(
    ("tp", "pp", "nvlink", "advised"),
    [(8, 1, False, "tensor_parallel_size 2 x pipeline_parallel_size 4"), (4, 1, False, "2 x pipeline_parallel_size 2")]
    + [(2, 4, False, None), (1, 1, False, None), (8, 1, True, None)],
)
def test_stages_are_advised_over_a_pcie_wide_all_reduce(tp, pp, nvlink, advised):
    advice = layout_advice(tensor_parallel_size=tp, pipeline_parallel_size=pp, nvlink=nvlink)
    if advised is None:
        assert advice is None
    else:
        assert advice is not None and advised in advice and "PCIe" in advice


def test_an_operator_worker_asks_for_every_stages_gpus_and_tells_vllm():
    raw = copy.deepcopy(yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text()))
    chat = next(e for e in raw["serving"]["endpoints"] if e["name"] == "qwen2-7b-chat")
    chat.update(instance_group="g6e-mid", tensor_parallel_size=2, pipeline_parallel_size=2)
    worker = model.operator_endpoint(Environment.model_validate(raw), "qwen2-7b-chat").spec()["worker"]
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == worker["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert worker["args"][worker["args"].index("--pipeline-parallel-size") + 1] == "2"
