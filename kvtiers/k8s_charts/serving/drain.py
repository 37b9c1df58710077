"""How serving pods stop: an engine's preStop hook (``kvtiers_engine_drain``, shipped in the LMCache ConfigMap) and
the grace period that covers it, and how soon a pod on a lost node is given up.

Kubernetes runs the hook as soon as the pod is deleted (a rollout, a scale-in, a node drain) and sends vLLM SIGTERM
when it returns; the grace period counts from the deletion, so it covers the hook and vLLM's own shutdown.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path, PurePosixPath

from cdk8s_plus_33 import k8s

from kvtiers.k8s_charts import kvtiers_engine_drain, names
from kvtiers.k8s_charts.vllm import LMCacheController

DRAIN_SCRIPT = Path(kvtiers_engine_drain.__file__).name
"""The hook's file name in the LMCache ConfigMap (and so in the mounted directory)."""
DRAIN_SETTLE_SECONDS = 5
"""Before the hook looks at the engine's load: the router's pod watch and the Service's endpoints drop a terminating
pod within about a second; requests routed just before still arrive."""
DRAIN_MAX_SECONDS = 120
"""The longest the hook waits for the engine's running and waiting requests to finish (a longer generation is cut,
as it would be without the hook)."""
VLLM_SHUTDOWN_SECONDS = 30
"""vLLM's own stop after SIGTERM (engine core and GPU workers exit) with nothing in flight."""
TERMINATION_GRACE_SECONDS = DRAIN_SETTLE_SECONDS + DRAIN_MAX_SECONDS + VLLM_SHUTDOWN_SECONDS
"""The engine pod's ``terminationGracePeriodSeconds``: the hook's bound plus vLLM's shutdown."""
DEREGISTER_RESEND_SECONDS = 1
"""kvaware: the hook repeats the deregistration this often. A worker's heartbeat re-registers it (with an empty
index that requests finishing during the drain fill again), so this must not exceed the heartbeat period, and the
shortest one :class:`~kvtiers.k8s_charts.vllm.LMCacheController` allows is 1 s."""


NODE_LOSS_TOLERATION_SECONDS = 30
"""A pod on a node that stopped answering is evicted after this, not Kubernetes' default 300 s. Eviction is what the
router sees: its discovery reads container statuses and the deletion timestamp, which the node lifecycle controller
does not change when it marks a lost node's pods not Ready, so until then it keeps routing to a dead engine; and a
kvaware endpoint's single router is replaced only then."""


def node_loss_tolerations() -> list[k8s.Toleration]:
    return [
        k8s.Toleration(key=key, operator="Exists", effect="NoExecute", toleration_seconds=NODE_LOSS_TOLERATION_SECONDS)
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]


@cache
def drain_source() -> str:
    """The hook's file, as the ConfigMap ships it."""
    return Path(kvtiers_engine_drain.__file__).read_text()


def python_binary(vllm_binary: str) -> str:
    """The engine image's Python with vLLM's packages (pyzmq among them): beside ``vllm`` in its venv, else on PATH."""
    path = PurePosixPath(vllm_binary)
    return str(path.parent / "python3") if path.is_absolute() else "python3"


def drain_command(
    *,
    vllm_binary: str,
    script_dir: str,
    controller: LMCacheController | None,
    router_host: str,
    gpu_workers: int,
) -> list[str]:
    """The preStop command: drain through vLLM's ``/metrics`` and, for kvaware, leave the router's controller.

    :param script_dir: where the LMCache ConfigMap is mounted.
    :param controller: the engines' LMCache controller settings (kvaware). @default None (no controller)
    :param router_host: the router Service that hosts the controller (used only with ``controller``).
    """
    command = [
        python_binary(vllm_binary),
        str(PurePosixPath(script_dir) / DRAIN_SCRIPT),
        "--metrics-url",
        f"http://127.0.0.1:{names.ENGINE_PORT}/metrics",
        "--settle-seconds",
        str(DRAIN_SETTLE_SECONDS),
        "--max-seconds",
        str(DRAIN_MAX_SECONDS),
    ]
    if controller is not None:
        assert DEREGISTER_RESEND_SECONDS <= controller.heartbeat_seconds, "checked by LMCacheController"
        command += [
            "--controller",
            f"{router_host}:{names.LMCACHE_CONTROLLER_PULL_PORT}",
            "--worker-ports",
            ",".join(str(p) for p in names.lmcache_worker_ports(gpu_workers)),
            "--resend-seconds",
            str(DEREGISTER_RESEND_SECONDS),
        ]
    return command
