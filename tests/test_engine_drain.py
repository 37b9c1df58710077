"""The engine's preStop hook (``kvtiers/k8s_charts/kvtiers_engine_drain.py``) as the chart renders it, against LMCache
0.3.11's own controller and workers and a vLLM-like ``/metrics``.

The controller (``LMCacheControllerManager``, as the router embeds it) and each engine's LMCache side (a real
``LMCacheWorker`` per rank, heartbeating every second, admitting keys as ``BatchedKVOperationMsg``) run in
``.venv-engine`` (``tests/fakes/lmcache_cluster.py``). The hook runs with the file and the command line of the
rendered Deployment and ConfigMap; only addresses and times are replaced by the test's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cdk8s
import pytest
import yaml

from kvtiers.k8s_charts import kvtiers_engine_drain
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import ROOT
from tests.fakes.openai_server import FakeOpenAI
from tests.test_lmcache_contract import kvaware_env
from tests.upstream import ENGINE_VENV, line_of, vllm_source
from tests.waiting import HANG_BOUND_SECONDS, until

PYTHON = ENGINE_VENV / "bin" / "python"
CLUSTER = ROOT / "tests" / "fakes" / "lmcache_cluster.py"
needs_engine = pytest.mark.skipif(not PYTHON.exists(), reason="no .venv-engine (make test installs it)")
HEARTBEAT_SECONDS = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendered_engine(endpoint: str = "kv") -> tuple[dict, dict[str, str]]:
    """The engine container and its ConfigMap's files, as the chart renders a kvaware endpoint (TP 2)."""
    objs = wiring.serving_chart(cdk8s.App(), endpoint, kvaware_env(), endpoint).to_json()
    deployment = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == f"{endpoint}-engine")
    config_map = next(o for o in objs if o["kind"] == "ConfigMap")
    return deployment["spec"]["template"]["spec"]["containers"][0], config_map["data"]


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def with_flags(command: list[str], **values: str) -> list[str]:
    """The command with some flags' values replaced (``settle_seconds`` for ``--settle-seconds``)."""
    out = list(command)
    for key, value in values.items():
        out[out.index("--" + key.replace("_", "-")) + 1] = value
    return out


class Cluster:
    """The controller and engines, in ``.venv-engine``."""

    def __init__(self, tmp_path: Path, files: dict[str, str]) -> None:
        self.tmp_path, self.files = tmp_path, files
        self.pull, self.reply, self.state_port = free_port(), free_port(), free_port()
        self.processes: list[subprocess.Popen] = []
        self.engines: dict[str, subprocess.Popen] = {}

    def _start(self, *args: str) -> subprocess.Popen:
        """Starts a process; :meth:`ready` waits for it (LMCache imports torch: seconds, so they start together)."""
        process = subprocess.Popen(
            [str(PYTHON), str(CLUSTER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
        )
        self.processes.append(process)
        return process

    def ready(self) -> None:
        for process in self.processes:
            assert process.stdout.readline().strip() == "ready"

    def start_controller(self) -> None:
        self._start("controller", "--pull-port", str(self.pull), "--reply-port", str(self.reply),
                    "--state-port", str(self.state_port))  # fmt: skip

    def start_engine(self, instance: str, ip: str) -> subprocess.Popen:
        """An engine whose LMCache config is the rendered one, pointed at this controller, with its own ports."""
        config = yaml.safe_load(self.files["lmcache.yaml"])
        config["controller_pull_url"] = f"127.0.0.1:{self.pull}"
        config["controller_reply_url"] = f"127.0.0.1:{self.reply}"
        config["lmcache_worker_ports"] = [free_port() for _ in config["lmcache_worker_ports"]]
        config["lmcache_worker_heartbeat_time"] = HEARTBEAT_SECONDS
        config["lmcache_worker_heartbeat_delay_time"] = HEARTBEAT_SECONDS
        path = self.tmp_path / f"{instance}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.engines[instance] = self._start("engine", "--config", str(path), "--instance", instance, "--ip", ip)
        return self.engines[instance]

    @staticmethod
    def admit(engine: subprocess.Popen, keys: list[int]) -> None:
        engine.stdin.write(json.dumps({"keys": keys}) + "\n")
        engine.stdin.flush()
        assert json.loads(engine.stdout.readline()) == {"admitted": len(keys)}

    def state(self, keys: list[int] = ()) -> dict:
        url = f"http://127.0.0.1:{self.state_port}/state?keys={','.join(map(str, keys))}"
        with urllib.request.urlopen(url, timeout=60) as response:  # a local answer; 60 s only on a stalled machine
            return json.loads(response.read())

    def wait_for(self, predicate, keys: list[int] = ()) -> dict:
        """The controller's first state that satisfies ``predicate``."""

        def satisfied() -> dict | None:
            state = self.state(keys)
            return state if predicate(state) else None

        return until(satisfied, what="the controller's state", seen=lambda: self.state(keys))

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def workers_of(state: dict, instance: str) -> list[int]:
    return [w for i, w in state["workers"] if i == instance]


LEAVING = ("kv-engine-drains", "kv-engine-once", "kv-engine-busy")
"""One departing engine per test (each test deregisters its own), all started with the controller."""
STAYING = "kv-engine-staying"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    _, files = rendered_engine()
    cluster = Cluster(tmp_path_factory.mktemp("lmcache"), files)
    try:
        cluster.start_controller()
        for index, instance in enumerate((*LEAVING, STAYING)):
            cluster.start_engine(instance, f"127.0.0.{index + 7}")
        cluster.ready()
        cluster.wait_for(lambda s: len(s["workers"]) == 2 * (len(LEAVING) + 1))
        cluster.admit(cluster.engines[STAYING], [999])
        yield cluster
    finally:
        cluster.close()


@dataclass
class Departure:
    """One engine leaving: both ranks registered, its keys admitted, and the hook as the chart renders it."""

    cluster: Cluster
    instance: str
    keys: list[int]
    command: list[str]
    """The rendered preStop command, with the test's controller address."""
    env: dict[str, str]
    """The container's variables the hook reads, as Kubernetes sets them for this pod."""

    def owners(self) -> set:
        return set(self.cluster.state(self.keys)["owners"].values())

    def registered(self) -> list[int]:
        return workers_of(self.cluster.state(), self.instance)

    def admit(self) -> None:
        self.cluster.admit(self.cluster.engines[self.instance], self.keys)

    def wait_for(self, predicate, process: subprocess.Popen | None = None) -> None:
        """Until ``predicate(self)`` holds (polling the controller); ``process``: the hook that must bring it about."""
        until(lambda: predicate(self), what=self.instance, process=process, seen=lambda: self.cluster.state(self.keys))

    def staying_intact(self) -> bool:
        state = self.cluster.state([999])
        return workers_of(state, STAYING) == [0, 1] and state["owners"] == {"999": STAYING}


def depart(cluster: Cluster, instance: str, tmp_path: Path) -> Departure:
    container, files = rendered_engine()
    keys = [1000 * (LEAVING.index(instance) + 1) + i for i in range(3)]
    departure = Departure(cluster, instance, keys, [], {})
    departure.admit()
    departure.wait_for(lambda d: d.owners() == {instance})
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    script = Path(command[1])
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    departure.command = with_flags(
        [str(PYTHON), str(tmp_path / script.name), *command[2:]], controller=f"127.0.0.1:{cluster.pull}"
    )
    assert (tmp_path / script.name).exists(), f"{script.name} is not in the LMCache ConfigMap"
    pod_env = {
        e["name"]: e["value"].replace("$(POD_NAME)", instance)
        for e in container["env"]
        if "value" in e and e["name"].startswith("LMCACHE_LMCACHE")
    }
    departure.env = {"PATH": os.environ.get("PATH", ""), **pod_env, "POD_IP": "127.0.0.7"}
    return departure


def start_hook(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_engine
def test_the_hook_leaves_the_controller_for_every_rank_while_the_engine_heartbeats_and_drains(cluster, tmp_path):
    """Each step waits for the controller's state to show it (the hook is a new Python process, the engines
    heartbeat once a second: seconds on a loaded machine); the times are printed, not asserted. Without the hook
    nothing deregisters a heartbeating engine, and without the repeat a re-admitted key stays with it (the next
    test): either would leave a wait below unanswered."""
    leaving = depart(cluster, "kv-engine-drains", tmp_path)
    with FakeOpenAI() as vllm:
        vllm.busy = 2
        command = with_flags(
            leaving.command, metrics_url=f"{vllm.url}/metrics", settle_seconds="1", max_seconds=str(HANG_BOUND_SECONDS)
        )
        started = time.monotonic()
        hook = start_hook(command, leaving.env)
        # Every rank of the departing engine leaves at once, with its index; the other engine keeps its own.
        leaving.wait_for(lambda d: not d.registered() and d.owners() == {None}, hook)
        left = time.monotonic() - started
        assert leaving.staying_intact()
        # The engine is still up: its heartbeats re-register it, and a request finishing now admits keys again. The
        # repeated deregistration takes them away.
        leaving.wait_for(lambda d: d.registered(), hook)
        leaving.admit()
        admitted = time.monotonic()
        leaving.wait_for(lambda d: d.owners() == {None}, hook)
        matchable_for = time.monotonic() - admitted
        time.sleep(2)  # a window in which the hook must not return: vLLM still has requests
        assert hook.poll() is None, "the hook returned while vLLM still had requests"
        vllm.busy = 0
        _, err = hook.communicate(timeout=HANG_BOUND_SECONDS)
        assert hook.returncode == 0, err
        # It saw the engine idle (at the bound it would say so instead) and stopped resending.
        assert "idle after" in err and "deregistering kv-engine-drains ranks 0-1" in err, err
        assert leaving.owners() == {None} and leaving.staying_intact()
        leaving.admit()  # the hook never stopped the engine: vLLM's SIGTERM does that after it
    print(f"\nleft the controller {left:.2f} s after the hook started; a re-admitted key stayed {matchable_for:.2f} s")


@needs_engine
def test_without_the_repeat_a_heartbeat_brings_the_departing_engine_back(cluster, tmp_path):
    """Why the hook repeats itself: one deregistration is undone by the engine's next heartbeat, and requests that
    finish during the drain make the departing engine the owner of their keys again."""
    leaving = depart(cluster, "kv-engine-once", tmp_path)
    with FakeOpenAI() as vllm:
        vllm.busy = 1
        command = with_flags(
            leaving.command, metrics_url=f"{vllm.url}/metrics", settle_seconds="0",
            max_seconds=str(HANG_BOUND_SECONDS), resend_seconds="600",
        )  # fmt: skip
        hook = start_hook(command, leaving.env)
        # The one deregistration has reached the controller: it took the engine's keys (for good, until a request
        # admits them again; its ranks come back at the next heartbeat, a window a loaded machine's polls can miss).
        leaving.wait_for(lambda d: d.owners() == {None}, hook)
        leaving.wait_for(lambda d: d.registered(), hook)
        leaving.admit()
        time.sleep(3 * HEARTBEAT_SECONDS)  # a window for a deregistration that must not come
        assert leaving.owners() == {"kv-engine-once"}
        vllm.busy = 0
        hook.communicate(timeout=HANG_BOUND_SECONDS)


@needs_engine
def test_an_engine_that_never_idles_is_let_go_at_the_bound(cluster, tmp_path):
    """The hook returns at its bound however loaded the machine is: never before settle + bound, and only by the
    bound (it says so) while vLLM stays busy."""
    leaving = depart(cluster, "kv-engine-busy", tmp_path)
    with FakeOpenAI() as vllm:
        vllm.busy = 3
        command = with_flags(leaving.command, metrics_url=f"{vllm.url}/metrics", settle_seconds="1", max_seconds="3")
        started = time.monotonic()
        _, err = start_hook(command, leaving.env).communicate(timeout=HANG_BOUND_SECONDS)
        took = time.monotonic() - started
        assert "bound after" in err, err
        assert took >= 4, took
        assert leaving.owners() == {None}


def test_an_engine_that_is_not_listening_has_nothing_to_drain():
    """It returns at once, without waiting for its bound: it says "unreachable", which it says only then."""
    container, _ = rendered_engine()
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    local = [sys.executable, kvtiers_engine_drain.__file__, "--metrics-url", f"http://127.0.0.1:{free_port()}/metrics"]
    local += ["--settle-seconds", "0", "--max-seconds", flag(command, "--max-seconds")]
    result = subprocess.run(local, capture_output=True, text=True, timeout=HANG_BOUND_SECONDS)
    assert result.returncode == 0 and "unreachable after" in result.stderr, result.stderr


def test_the_drain_reads_the_gauges_vllm_serves():
    """The fake's gauges are vLLM 0.12.0's: the hook's names must be the scheduler's (``vllm/v1/metrics/loggers.py``),
    and the sum runs over every series (one per engine core) and ignores comments and other metrics."""
    loggers = vllm_source("vllm/v1/metrics/loggers.py")
    for name in kvtiers_engine_drain.IN_FLIGHT_METRICS:
        assert line_of(loggers, rf'name="{name}"')
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        'vllm:num_requests_running{engine="0",model_name="m a"} 2.0\n'
        'vllm:num_requests_running{engine="1",model_name="m a"} 1.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m a"} 4.0\n'
        'vllm:num_requests_running_total{engine="0"} 7.0\n'
        "vllm:num_requests_waiting 1\n"
    )
    assert kvtiers_engine_drain.in_flight(text) == 8.0
