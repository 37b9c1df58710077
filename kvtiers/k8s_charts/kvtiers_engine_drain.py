"""kvtiers engine drain: the engine container's preStop hook, so that an engine leaves before it stops.

This file runs inside the engine image (``python3 kvtiers_engine_drain.py ...``), not in kvtiers: the serving charts
ship it in the endpoint's LMCache ConfigMap and name it in the container's ``lifecycle.preStop``. Kubernetes runs the
hook when the pod starts terminating, while vLLM still serves, and sends SIGTERM only when the hook returns. The
router's pod discovery (production-stack ``K8sPodIPServiceDiscovery``) drops a terminating pod from its endpoints as
soon as the pod watch reports it; the hook covers what the discovery cannot:

1. kvaware endpoints: vLLM 0.12.0 never shuts LMCache's worker down, so the engine never deregisters, and the
   router's LMCache controller keeps matching prompts to the departing engine until its worker timeout. The hook
   sends the controller the ``DeRegisterMsg`` that LMCache 0.3.11's own ``LMCacheWorker.deregister`` would send,
   for every rank (controller_manager.py decodes a JSON part as a message; ``deregister`` reads only the instance and
   worker ids). Until the hook returns it sends them again every ``--resend-seconds`` (at most one heartbeat
   period): the engine's heartbeats re-register an unknown worker, and requests that finish during the drain would
   admit keys to it again.
2. Every endpoint: after ``--settle-seconds`` (the router and the Service stop sending the pod requests), the hook
   polls vLLM's ``/metrics`` until no request is running or waiting, for at most ``--max-seconds``; then it returns,
   and vLLM stops with no request in flight. An engine that cannot be reached has nothing to drain.

Standard library only, plus pyzmq (in the engine image with LMCache) for the controller. The hook never fails the
pod's termination: whatever happens, it returns by ``--settle-seconds`` + ``--max-seconds`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

IN_FLIGHT_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")
"""vLLM 0.12.0's scheduler gauges (``vllm/v1/metrics/loggers.py``), one series per engine core."""
INSTANCE_ID_ENV = "LMCACHE_LMCACHE_INSTANCE_ID"
"""The LMCache instance id the engine registered with (the pod name, set by the serving chart)."""
POD_IP_ENV = "POD_IP"
"""The address LMCache's worker registered with (its ``get_ip()`` finds the pod IP); the controller ignores it when it
deregisters, but the message carries what the worker itself would send."""
LOG_PREFIX = "kvtiers-engine-drain"
LINGER_MS = 2000
"""How long closing the socket may wait for the last deregistrations to leave."""
FIRST_SEND_RETRY_SECONDS = 0.05
"""How soon a first deregistration that found the socket not yet connected is tried again."""

IDLE = "idle"
BOUND = "bound"
UNREACHABLE = "unreachable"


def log(message: str) -> None:
    print(f"{LOG_PREFIX}: {message}", file=sys.stderr, flush=True)


def deregistrations(instance_id: str, ip: str, worker_ports: Sequence[int]) -> list[bytes]:
    """One ``DeRegisterMsg`` per rank, as JSON (rank r uses worker port r, as LMCache assigns them)."""
    return [
        json.dumps(
            {"type": "DeRegisterMsg", "instance_id": instance_id, "worker_id": rank, "ip": ip, "port": port}
        ).encode()
        for rank, port in enumerate(worker_ports)
    ]


class Deregistration:
    """Sends the deregistrations at once and again every ``period`` seconds until :meth:`stop` (a first send that
    finds the socket not yet connected is tried again after :data:`FIRST_SEND_RETRY_SECONDS`)."""

    def __init__(self, controller: str, messages: list[bytes], period: float) -> None:
        import zmq

        self._zmq = zmq
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.LINGER, LINGER_MS)
        self._socket.connect(f"tcp://{controller}")
        self._messages, self._period = messages, period
        self._stopped = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _send(self) -> bool:
        try:
            self._socket.send_multipart(self._messages, flags=self._zmq.NOBLOCK)
            self.sent += 1
            return True
        except self._zmq.Again:
            return False  # not connected yet (or the controller is away)

    def _run(self) -> None:
        # Until the first send goes out (the socket connects asynchronously) it is tried again at once, not a
        # whole period later: the engine must leave the controller when its drain starts.
        while True:
            wait = self._period if self._send() or self.sent else min(self._period, FIRST_SEND_RETRY_SECONDS)
            if self._stopped.wait(wait):
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        self._send()
        self._socket.close()
        self._context.term()


def in_flight(metrics_text: str) -> float:
    """Running plus waiting requests over every series of vLLM's scheduler gauges."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith(IN_FLIGHT_METRICS):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            value = rest.rpartition("}")[2]
        else:
            name, _, value = line.partition(" ")
        if name in IN_FLIGHT_METRICS:
            total += float(value.split()[0])
    return total


def read_metrics(url: str, timeout: float) -> str | None:
    """The metrics page, or None when nothing listens there (the engine has stopped or not yet started)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text: str = response.read().decode()
            return text
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise


def wait_until_idle(
    metrics_url: str,
    *,
    settle: float,
    bound: float,
    poll: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
) -> str:
    """Waits ``settle`` seconds, then until the engine reports no request in flight, at most ``bound`` seconds more.
    Returns :data:`IDLE`, :data:`UNREACHABLE` or :data:`BOUND`."""
    sleep(settle)
    deadline = clock() + bound
    while True:
        try:
            text = read_metrics(metrics_url, timeout=max(min(poll, deadline - clock()), 0.1))
            if text is None:
                return UNREACHABLE
            if in_flight(text) == 0:
                return IDLE
        except (OSError, ValueError) as exc:  # a slow or garbled answer: the engine may still be busy
            log(f"reading {metrics_url}: {exc}")
        remaining = deadline - clock()
        if remaining <= 0:
            return BOUND
        sleep(min(poll, remaining))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kvtiers_engine_drain", description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-url", required=True, help="vLLM's /metrics in this pod")
    parser.add_argument("--settle-seconds", type=float, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    parser.add_argument("--controller", help="kvaware: the LMCache controller's pull address, host:port")
    parser.add_argument("--worker-ports", help="kvaware: the LMCache worker port of each rank, comma-separated")
    parser.add_argument("--resend-seconds", type=float, default=1.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    deregistration = None
    if args.controller:
        instance_id = os.environ.get(INSTANCE_ID_ENV, "")
        ports = [int(p) for p in (args.worker_ports or "").split(",") if p]
        if instance_id and ports:
            messages = deregistrations(instance_id, os.environ.get(POD_IP_ENV, ""), ports)
            try:
                deregistration = Deregistration(args.controller, messages, args.resend_seconds)
                log(f"deregistering {instance_id} ranks 0-{len(ports) - 1} from {args.controller}")
            except Exception as exc:  # noqa: BLE001 - no pyzmq or a bad address: the drain goes on without it
                log(f"cannot reach the controller {args.controller}: {exc}")
        else:
            log(f"{INSTANCE_ID_ENV} or --worker-ports missing: not deregistering")
    try:
        outcome = wait_until_idle(
            args.metrics_url, settle=args.settle_seconds, bound=args.max_seconds, poll=args.poll_seconds
        )
    finally:
        if deregistration is not None:
            deregistration.stop()
    sends = f", deregistrations sent {deregistration.sent} times" if deregistration is not None else ""
    log(f"{outcome} after {time.monotonic() - started:.1f} s{sends}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
