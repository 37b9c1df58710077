"""kvaware while an engine goes away, with production-stack's router itself (``vllm-stack-0.1.12``, run from source).

The router runs as the chart renders it (its arguments, environment and, with the fallback, the module from its
ConfigMap) in ``.venv-router`` (Python 3.12, the router's own pins and LMCache 0.3.11; ``tests/stubs`` stands in for
torch, which the kvaware path imports but never calls for token lists). Its source comes from a git mirror of
vllm-project/production-stack (``make upstream-mirrors``, see ``tests/upstream.py``): the router is not on
PyPI (PyPI's ``vllm-router`` is another project), and kvtiers never ships its code.

The cluster around it: a fake Kubernetes API that the router's ``K8sPodIPServiceDiscovery`` watches, with engine pods
labelled as the chart labels them; each engine a fake vLLM (``tests/fakes/openai_server.py``) on its own loopback
address, whose LMCache side is LMCache 0.3.11's own worker and batched sender (``tests/fakes/lmcache_cluster.py``):
it registers and heartbeats with the router's embedded controller and admits the chunks of every prompt it served.
Clients send repeated long prompts, so kvaware routes most of them by cache hit. Mid-traffic one engine goes away:

- ``node-loss``: the engine process dies (no preStop hook runs) and its pod leaves the endpoint list; the controller
  keeps its index until its worker timeout. The router had already routed cache hits to it, so its map holds the
  departed engine's address;
- ``node-loss-unmapped``: the same, before any cache hit: the router never mapped the departed engine's instance;
- ``rollout``: the pod starts terminating and the rendered preStop hook (``kvtiers_engine_drain.py``) runs while the
  engine still serves; when the hook returns the engine stops and the pod is deleted.

Each run reports requests sent, failed (not HTTP 200), failed among those sent after the engine left the router's
endpoint list, and requests the departed engine received after that.
``pytest -s tests/test_router_rollout.py`` prints the table.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cdk8s
import pytest
import yaml

from kvtiers.catalog.versions import DEFAULT_ROUTER_IMAGE, KVAWARE_FALLBACK_ROUTER, router_release
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.serving.router import TOKENIZER_MODEL_ENV
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import ROOT
from tests.fakes.kube_server import FakeKube
from tests.fakes.openai_server import FakeOpenAI
from tests.shipped import load_shipped
from tests.test_engine_drain import free_port, with_flags
from tests.test_lmcache_contract import kvaware_env
from tests.upstream import MIRROR_SKIP, mirror_git_dir, skip_without_mirror
from tests.waiting import HANG_BOUND_SECONDS, until

ROUTER_VENV = ROOT / ".venv-router"
STUBS = ROOT / "tests" / "stubs"
CLUSTER = ROOT / "tests" / "fakes" / "lmcache_cluster.py"
RELEASE = router_release(DEFAULT_ROUTER_IMAGE).production_stack
ENDPOINT = "kv"
ENGINES = ("a", "b", "c")
DEPARTING = "b"
PROMPTS = 9
PROMPT_WORDS = 600
"""Two full LMCache chunks (256 tokens) per prompt: the controller matches 512 tokens on the engine that served it."""
WORKER_TIMEOUT_SECONDS = 6
"""The router's ``--lmcache-worker-timeout`` in the drill (30 s by default, 40 s as kvtiers renders it): the window in
which a departed engine's index still answers lookups is this plus the health-check interval."""
CLIENTS = 4
HITS_BEFORE = 3
"""Cache hits on the departing engine the drill waits for before it leaves (its index is in use)."""
AFTER_THE_WINDOW = 2 * PROMPTS
"""Requests the drill waits for after the router's window has closed: every prompt, twice."""
DRILL_KEY = "drill-key-0123456789"


def mirror() -> Path | None:
    return mirror_git_dir("vllm-project/production-stack")


def skip_reason() -> str | None:
    if not (ROUTER_VENV / ".installed").exists():
        return "no .venv-router (make test builds it where Python 3.12 is installed)"
    git_dir = mirror()
    if git_dir is None:
        return f"the router's source ({RELEASE}): {MIRROR_SKIP}"
    tag = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "-q", RELEASE + "^{commit}"], capture_output=True
    )
    return None if tag.returncode == 0 else f"{git_dir} has no tag {RELEASE}"


@pytest.fixture(scope="module", autouse=True)
def _router_source_available() -> None:
    reason = skip_reason()
    if reason is not None and MIRROR_SKIP in reason:
        skip_without_mirror(reason)
    elif reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def router_source(tmp_path_factory) -> Path:
    """``src/`` of the router at the pinned tag (a temporary copy; nothing of it is kept)."""
    out = tmp_path_factory.mktemp("production-stack")
    archive = subprocess.run(
        ["git", "--git-dir", str(mirror()), "archive", RELEASE, "src/vllm_router"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "x", "-C", str(out)], input=archive, check=True)
    return out / "src"


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    objs = wiring.serving_chart(cdk8s.App(), ENDPOINT, kvaware_env(), ENDPOINT).to_json()
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objs}


def container(objs: dict[str, dict], deployment: str) -> dict:
    return objs[f"Deployment/{deployment}"]["spec"]["template"]["spec"]["containers"][0]


@dataclass
class Figures:
    scenario: str
    fallback: bool
    sent: int = 0
    failed: int = 0
    failed_after: int = 0
    """Failed requests sent after the engine had left the router's endpoint list. Before that the router cannot
    know: a node loss fails the requests routed to the dead engine until its pod leaves the list (about 40 s of
    NotReady detection in a cluster; at once in the drill)."""
    to_departed: int = 0
    hits_before: int = 0
    """Requests the departing engine served before it left (so its index was in use)."""
    engines_refused: int = 0
    """Requests the engines' own key check refused (the router's discovery, stats and forwarded requests included)."""
    direct_without_key: int = 0
    """The HTTP status of a completion sent straight to an engine without a key."""

    def row(self) -> str:
        return (
            f"| {self.scenario} | {'kvtiers fallback' if self.fallback else 'router as released'} | {self.sent} | "
            f"{self.failed} | {self.failed_after} | {self.to_departed} |"
        )


class Drill:
    """The fake cluster and the real router for one run."""

    def __init__(self, tmp: Path, source: Path, objs: dict[str, dict], *, fallback: bool) -> None:
        self.tmp, self.source, self.objs, self.fallback = tmp, source, objs, fallback
        self.kube = FakeKube()
        self.engine_port = free_port()
        self.pull, self.reply, self.router_port = free_port(), free_port(), free_port()
        self.vllm: dict[str, FakeOpenAI] = {}
        self.lmcache: dict[str, subprocess.Popen] = {}
        self.router: subprocess.Popen | None = None
        self.engine_container = container(objs, names.engine_name(ENDPOINT))
        self.config_map = objs[f"ConfigMap/{names.lmcache_config_map_name(ENDPOINT)}"]["data"]
        # The endpoint's key as the CSI driver mounts it in the router and the engines; the drill's client sends it.
        self.key_file = tmp / "api-key"
        self.key_file.write_text(f"{DRILL_KEY}\n")

    def engine_key_check(self) -> Callable[[str, str, str | None], bool] | None:
        """Whether an engine refuses a request (method, path, ``Authorization``), by the key check its ConfigMap ships
        and its ``--middleware`` names, over the mounted key file; None for engines without one."""
        args = self.engine_container["args"]
        if "--middleware" not in args:
            return None
        module, _, middleware = args[args.index("--middleware") + 1].rpartition(".")
        shipped = load_shipped(module, self.config_map[f"{module}.py"], self.tmp)
        check = getattr(shipped, middleware)(None, key_file=str(self.key_file))

        def refuses(method: str, path: str, header: str | None) -> bool:
            headers = [(b"authorization", header.encode())] if header is not None else []
            return not check.allows({"type": "http", "method": method, "path": path, "headers": headers})

        return refuses

    @staticmethod
    def pod_name(engine: str) -> str:
        return f"{names.engine_name(ENDPOINT)}-{engine}"

    @staticmethod
    def ip(engine: str) -> str:
        return f"127.0.0.{11 + ENGINES.index(engine)}"

    # ------------------------------------------------------------------ engines

    def _engine_config(self, engine: str) -> Path:
        config = yaml.safe_load(self.config_map["lmcache.yaml"])
        config.update(
            controller_pull_url=f"127.0.0.1:{self.pull}",
            controller_reply_url=f"127.0.0.1:{self.reply}",
            lmcache_worker_ports=[free_port() for _ in config["lmcache_worker_ports"]],
            lmcache_worker_heartbeat_time=1,
            lmcache_worker_heartbeat_delay_time=1,
        )
        config.pop("remote_url", None)
        path = self.tmp / f"{engine}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_engines(self) -> None:
        seed = next(e["value"] for e in self.engine_container["env"] if e["name"] == "PYTHONHASHSEED")
        for engine in ENGINES:
            self.lmcache[engine] = subprocess.Popen(
                [str(ROUTER_VENV / "bin" / "python"), str(CLUSTER), "engine", "--config",
                 str(self._engine_config(engine)), "--instance", self.pod_name(engine), "--ip", self.ip(engine)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env={"PATH": os.environ["PATH"], "PYTHONPATH": str(STUBS), "PYTHONHASHSEED": seed},
            )  # fmt: skip
        for engine in ENGINES:
            assert self.lmcache[engine].stdout.readline().strip() == "ready"
            lock = threading.Lock()

            def admit(tokens: list[int], process=self.lmcache[engine], lock=lock) -> None:
                with lock:
                    if process.poll() is None:
                        process.stdin.write(json.dumps({"tokens": tokens}) + "\n")
                        process.stdin.flush()
                        process.stdout.readline()

            server = FakeOpenAI(base_s=0.005, per_token_s=0.0, host=self.ip(engine), port=self.engine_port,
                                on_completion=admit, refuses=self.engine_key_check())  # fmt: skip
            self.vllm[engine] = server.__enter__()
            labels = self.objs[f"Deployment/{names.engine_name(ENDPOINT)}"]["spec"]["template"]["metadata"]["labels"]
            pod = self.kube.add_pod("serving", self.pod_name(engine), labels, node="node-1")
            pod["spec"]["containers"][0]["name"] = self.engine_container["name"]
            pod["status"]["podIP"] = self.ip(engine)
            pod["status"]["containerStatuses"] = [
                {"name": "vllm", "ready": True, "restartCount": 0, "image": "engine", "imageID": "engine"}
            ]

    # ------------------------------------------------------------------ router

    def start_router(self) -> None:
        router = container(self.objs, names.router_name(ENDPOINT))
        args = with_flags(
            router["args"],
            host="127.0.0.1",
            port=str(self.router_port),
            k8s_port=str(self.engine_port),
            lmcache_controller_port=str(self.pull),
            lmcache_controller_reply_port=str(self.reply),
            lmcache_worker_timeout=str(WORKER_TIMEOUT_SECONDS),
        )
        args += ["--lmcache-health-check-interval", "1", "--engine-stats-interval", "5", "--log-level", "warning"]
        path = [str(self.source), str(STUBS)]
        if self.fallback:
            scripts = self.tmp / "router-scripts"
            scripts.mkdir()
            for name, text in self.objs[f"ConfigMap/{names.router_scripts_config_map_name(ENDPOINT)}"]["data"].items():
                (scripts / name).write_text(text)
            path.insert(0, str(scripts))
        else:
            index = args.index("--callbacks")
            del args[index : index + 2]
        kubeconfig = self.tmp / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.kube.url}}],
                    "users": [{"name": "fake", "user": {}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        env = {e["name"]: e["value"] for e in router["env"] if "value" in e and e["name"] != "PYTHONPATH"}
        # The drill's router tokenizes through the engines' /tokenize (one token per word, as its fake LMCache
        # admits them), not through a copied tokenizer: the start check of that copy is tested on its own.
        env.pop(TOKENIZER_MODEL_ENV)
        if "KVTIERS_API_KEY_FILE" in env:
            env["KVTIERS_API_KEY_FILE"] = str(self.key_file)
        env.update(
            PATH=os.environ["PATH"],
            HOME=str(self.tmp),
            HF_HOME=str(self.tmp / "hf"),
            HF_HUB_OFFLINE="1",
            KUBECONFIG=str(kubeconfig),
            PYTHONPATH=os.pathsep.join(path),
        )
        self.router_log = (self.tmp / "router.log").open("w")
        self.router = subprocess.Popen(
            [str(ROUTER_VENV / "bin" / "python"), "-c", "from vllm_router.app import main; main()", *args],
            env=env,
            stdout=self.router_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        until(
            lambda: len(self.engines_listed()) == len(ENGINES),
            what="the router lists every engine",
            process=self.router,
            seen=lambda: (self.tmp / "router.log").read_text()[-3000:],
            poll=0.2,
        )

    def engines_listed(self) -> list:
        with urllib.request.urlopen(f"{self.url}/engines", timeout=30) as response:
            return list(json.loads(response.read()))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def complete(self, prompt: str, *, url: str | None = None, key: str | None = DRILL_KEY) -> int:
        body = json.dumps({"model": "test-model", "prompt": prompt, "max_tokens": 2}).encode()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        request = urllib.request.Request(f"{url or self.url}/v1/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    # ------------------------------------------------------------------ departures

    def kill(self, engine: str) -> None:
        self.vllm[engine].kill()
        self.lmcache[engine].kill()
        self.lmcache[engine].wait()

    def endpoints_left(self, engine: str) -> float:
        """When the router's endpoint list (``/engines``) no longer has the engine: from then on no request should go
        there (before it, the router cannot know; a terminating engine still serves those)."""
        until(
            lambda: len(self.engines_listed()) < len(ENGINES),  # its cards carry no address
            what=f"the router no longer lists {engine}",
            process=self.router,
            poll=0.01,
        )
        return time.monotonic()

    def served_by(self, i: int) -> str:
        """The engine that serves prompt ``i`` now (nothing else may be sending)."""
        before = {engine: len(server.arrivals) for engine, server in self.vllm.items()}
        assert self.complete(prompt(i)) == 200
        return next(engine for engine, server in self.vllm.items() if len(server.arrivals) > before[engine])

    def node_loss(self, engine: str) -> float:
        self.kill(engine)
        self.kube.delete_pod(self.pod_name(engine))
        return self.endpoints_left(engine)

    def rollout(self, engine: str) -> float:
        """The pod terminates: the router's watch sees it, the kubelet runs the preStop hook, then stops vLLM."""
        self.kube.update_pod(
            self.pod_name(engine), lambda pod: pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z")
        )
        command = self.engine_container["lifecycle"]["preStop"]["exec"]["command"]
        hook = self.tmp / Path(command[1]).name
        hook.write_text(self.config_map[hook.name])
        command = with_flags(
            [str(ROUTER_VENV / "bin" / "python"), str(hook), *command[2:]],
            metrics_url=f"http://{self.ip(engine)}:{self.engine_port}/metrics",
            controller=f"127.0.0.1:{self.pull}",
            settle_seconds="1",
            max_seconds="20",
        )
        env = {
            "PATH": os.environ["PATH"],
            "LMCACHE_LMCACHE_INSTANCE_ID": self.pod_name(engine),
            "POD_IP": self.ip(engine),
        }

        def stop_after_hook() -> None:
            subprocess.run(command, env=env, capture_output=True, timeout=HANG_BOUND_SECONDS)
            self.kill(engine)
            self.kube.delete_pod(self.pod_name(engine))

        threading.Thread(target=stop_after_hook, daemon=True).start()
        return self.endpoints_left(engine)

    def close(self) -> None:
        if self.router is not None:
            os.killpg(self.router.pid, signal.SIGKILL)
            self.router.wait()
            self.router_log.close()
        for engine in ENGINES:
            if engine in self.lmcache:
                self.lmcache[engine].kill()
            if engine in self.vllm:
                self.vllm[engine].__exit__(None, None, None)
        self.kube.__exit__(None, None, None)


def prompt(i: int) -> str:
    return " ".join(f"p{i}w{j}" for j in range(PROMPT_WORDS))


def run(tmp: Path, source: Path, objs: dict[str, dict], *, scenario: str, fallback: bool) -> Figures:
    figures = Figures(scenario, fallback)
    drill = Drill(tmp, source, objs, fallback=fallback)
    drill.kube.__enter__()
    try:
        drill.start_engines()
        drill.start_router()
        # Each prompt's first request is a miss; the engine that serves it caches it and admits it to the
        # controller (asynchronously). Once the router sends every prompt back to that engine, twice, the
        # admits have arrived.
        cached_on = [drill.served_by(i) for i in range(PROMPTS)]
        until(
            lambda: all(drill.served_by(i) == drill.served_by(i) == cached_on[i] for i in range(PROMPTS)),
            what="the router routes each prompt to the engine that cached it",
            process=drill.router,
        )
        assert DEPARTING in cached_on, cached_on
        statuses: list[tuple[float, int]] = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(offset: int) -> None:
            i = offset
            while not stop.is_set():
                sent = time.monotonic()
                status = drill.complete(prompt(i % PROMPTS))
                with lock:
                    statuses.append((sent, status))
                i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        departed = drill.vllm[DEPARTING]
        figures.hits_before = len(departed.arrivals)  # its own prompts' misses: its index holds them
        start = time.monotonic()
        if scenario == "node-loss-unmapped":
            left = drill.node_loss(DEPARTING)
        for thread in threads:
            thread.start()
        if scenario != "node-loss-unmapped":
            until(
                lambda: sum(t >= start for t in departed.arrivals) >= HITS_BEFORE, what="hits on the departing engine"
            )
            figures.hits_before = sum(t >= start for t in departed.arrivals)  # cache hits routed to it
            left = drill.node_loss(DEPARTING) if scenario == "node-loss" else drill.rollout(DEPARTING)
        # The router's own window closes after the worker timeout plus a health-check interval (a duration of the
        # code under test, not a guess at this machine's speed); the drill then watches a round of every prompt.
        closes = left + WORKER_TIMEOUT_SECONDS + 4
        until(lambda: sum(sent > closes for sent, _ in list(statuses)) >= AFTER_THE_WINDOW,
              what="requests after the router's window", process=drill.router, poll=0.2)  # fmt: skip
        stop.set()
        for thread in threads:
            thread.join(timeout=HANG_BOUND_SECONDS)
        figures.sent = len(statuses)
        figures.failed = sum(status != 200 for _, status in statuses)
        figures.failed_after = sum(status != 200 for sent, status in statuses if sent > left)
        figures.to_departed = sum(t > left for t in departed.arrivals)
        figures.engines_refused = sum(len(engine.refused) for engine in drill.vllm.values())
        engine_url = f"http://{drill.ip(ENGINES[0])}:{drill.engine_port}"
        figures.direct_without_key = drill.complete(prompt(0), url=engine_url, key=None)
    finally:
        drill.close()
    return figures


@pytest.mark.parametrize(
    ("scenario", "fallback"),
    [(scenario, fallback) for scenario in ("node-loss", "node-loss-unmapped", "rollout") for fallback in (False, True)],
    ids=lambda value: value if isinstance(value, str) else ("fallback" if value else "released"),
)
def test_an_engine_leaving_mid_traffic(scenario, fallback, router_source, rendered, tmp_path):
    figures = run(tmp_path, router_source, rendered, scenario=scenario, fallback=fallback)
    print("\n| scenario | router | requests sent | failed | failed after it left | sent to the departed engine after |")
    print(figures.row())
    assert figures.hits_before > 0, figures
    # The engines check the key too: the router's own calls pass it, and a caller beside the router gets 401.
    assert figures.engines_refused == 0 and figures.direct_without_key == 401, figures
    if fallback:
        assert figures.failed_after == 0 and figures.to_departed == 0, figures
        # A node loss fails what was in flight on the dead engine; a rollout drains it: nothing fails.
        assert figures.failed == 0 or scenario.startswith("node-loss"), figures
    elif scenario.startswith("node-loss"):
        # The released router answers HTTP 500 for the departed engine's cached prompts until the worker timeout:
        # a dead connection to the mapped address, or a KeyError for an instance it never mapped.
        assert figures.failed_after > 0, figures


def test_the_fallback_is_pinned_to_the_router_release_it_was_reviewed_against(router_source):
    """The module refuses other code; the version matrix names the release it accepts."""
    scripts = router_source.parent / "scripts"
    scripts.mkdir(exist_ok=True)
    shutil.copy(ROOT / "kvtiers" / "k8s_charts" / "kvtiers_kvaware_fallback.py", scripts)
    changed = router_source.parent / "changed"
    shutil.copytree(router_source, changed, dirs_exist_ok=True)
    logic = changed / "vllm_router" / "routers" / "routing_logic.py"
    text = logic.read_text()
    assert "found by kvaware router" in text
    logic.write_text(text.replace("found by kvaware router", "found by the kvaware router"))  # any change counts
    check = (
        "import kvtiers_kvaware_fallback as f; from vllm_router.routers.routing_logic import KvawareRouter as K; "
        "print(f.SUPPORTED_ROUTER, K.route_request._kvtiers_fallback)"
    )
    runs = {}
    for name, source in (("pinned", router_source), ("changed", changed)):
        runs[name] = subprocess.run(
            [str(ROUTER_VENV / "bin" / "python"), "-c", check],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join([str(scripts), str(source), str(STUBS)])},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert runs["pinned"].returncode == 0, runs["pinned"].stderr[-2000:]
    assert runs["pinned"].stdout.split() == [KVAWARE_FALLBACK_ROUTER, "True"]
    assert runs["changed"].returncode != 0
    assert "is not the vllm-stack-0.1.12 code this module was reviewed" in runs["changed"].stderr


def test_a_kvaware_router_without_a_usable_tokenizer_copy_fails_at_start(router_source, rendered, tmp_path):
    """The fallback module loads the copied tokenizer when the router starts: without the copy the start fails with
    the reason (production-stack would tokenize every request through one engine instead); with it the start goes on."""
    from tests.test_endpoint_secrets import TINY_TOKENIZER

    router = container(rendered, names.router_name(ENDPOINT))
    model = next(e["value"] for e in router["env"] if e["name"] == TOKENIZER_MODEL_ENV)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    fallback = "kvtiers_kvaware_fallback.py"
    (scripts / fallback).write_text(
        rendered[f"ConfigMap/{names.router_scripts_config_map_name(ENDPOINT)}"]["data"][fallback]
    )
    hf_home = tmp_path / "hf"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join([str(scripts), str(router_source), str(STUBS)]),
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        TOKENIZER_MODEL_ENV: model,
    }
    start = [str(ROUTER_VENV / "bin" / "python"), "-c", "import kvtiers_kvaware_fallback"]
    missing = subprocess.run(start, capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and f"cannot load the tokenizer of {model!r}" in missing.stderr, missing.stderr
    repo = hf_home / "hub" / f"models--{model.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    made = subprocess.run(
        [str(ROUTER_VENV / "bin" / "python"), "-c", TINY_TOKENIZER, str(snapshot)], capture_output=True
    )
    assert made.returncode == 0, made.stderr
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    copied = subprocess.run(start, capture_output=True, text=True, env=env)
    assert copied.returncode == 0, copied.stderr[-2000:]
