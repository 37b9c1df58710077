"""LMCache 0.3.11's own controller and workers, run by path in an LMCache venv (``.venv-engine``, ``.venv-router``).

- ``controller``: ``LMCacheControllerManager`` as the router embeds it (pull and reply sockets, health check), plus
  a loopback HTTP page with its registry: ``GET /state?keys=1,2`` answers the registered ``[instance, worker]``
  pairs and which instance ``find_kv`` gives for each key.
- ``engine``: one engine's LMCache side: a real ``LMCacheWorker`` per rank (it registers, then heartbeats every
  ``lmcache_worker_heartbeat_time``). Each stdin line ``{"keys": [...]}`` or ``{"tokens": [...]}`` admits chunk hashes
  on every rank as a stored chunk does: a ``BatchedKVOperationMsg`` of ``ADMIT`` events with consecutive sequence
  numbers, location ``LocalCPUBackend``, through the worker's queue (what 0.3.11's ``BatchedMessageSender`` sends for
  ``LocalCPUBackend``; the sender itself is not used because its package imports the storage backends, which need a
  real torch). Tokens are hashed by LMCache's ``ChunkedTokenDatabase`` with the engine's config, full chunks only.
  The process never deregisters: kill it, and it is gone the way a stopped vLLM 0.12.0 leaves (no shutdown hook).

Prints ``ready`` on stdout when it is up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def controller(args: argparse.Namespace) -> None:
    from lmcache.v1.cache_controller.controller_manager import LMCacheControllerManager

    manager = LMCacheControllerManager(
        {"pull": f"127.0.0.1:{args.pull_port}", "reply": f"127.0.0.1:{args.reply_port}"},
        health_check_interval=args.health_interval,
        lmcache_worker_timeout=args.worker_timeout,
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(manager.start_all(), loop)
    registry = manager.reg_controller.registry

    async def state(keys: list[int]) -> dict:
        workers = sorted([w.instance_id, w.worker_id] for w in registry.get_all_worker_infos())
        owners = {}
        for key in keys:
            found = registry.find_kv(key)
            owners[str(key)] = None if found is None else found.instance_id
        return {"workers": workers, "owners": owners}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)
            keys = [int(k) for k in (query.get("keys") or [""])[0].split(",") if k]
            body = json.dumps(asyncio.run_coroutine_threadsafe(state(keys), loop).result(5)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", args.state_port), Handler)
    print("ready", flush=True)
    server.serve_forever()


def engine(args: argparse.Namespace) -> None:
    import torch
    from lmcache.config import LMCacheEngineMetadata
    from lmcache.v1.cache_controller import worker as worker_module
    from lmcache.v1.cache_controller.message import BatchedKVOperationMsg, KVOpEvent, OpType
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.token_database import ChunkedTokenDatabase

    # The pod IP that LMCache's get_ip() would find (the test's engines share one host, each on its own address).
    worker_module.get_ip = lambda: args.ip
    config = LMCacheEngineConfig.from_file(args.config)
    config.lmcache_instance_id = args.instance
    world_size = len(config.lmcache_worker_ports)
    workers = []
    for rank in range(world_size):
        metadata = LMCacheEngineMetadata(
            model_name="test-model",
            world_size=world_size,
            worker_id=rank,
            fmt="vllm",
            kv_dtype=torch.bfloat16,
            kv_shape=(1, 2, config.chunk_size, 1, 1),
        )
        workers.append(worker_module.LMCacheWorker(config, metadata, None))
    token_database = ChunkedTokenDatabase(config, metadata)
    sequence = 0
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "tokens" in request:
            keys = [key for _, _, key in token_database.process_tokens(request["tokens"], make_key=False)]
        else:
            keys = request["keys"]
        operations = [KVOpEvent(op_type=OpType.ADMIT, key=key, seq_num=sequence + n) for n, key in enumerate(keys)]
        sequence += len(keys)
        for rank, lmcache_worker in enumerate(workers):
            # LocalCPUBackend names the location by its class (str(self)).
            lmcache_worker.put_msg(
                BatchedKVOperationMsg(
                    instance_id=args.instance, worker_id=rank, location="LocalCPUBackend", operations=operations
                )
            )
        print(json.dumps({"admitted": len(keys)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("controller")
    c.add_argument("--pull-port", type=int, required=True)
    c.add_argument("--reply-port", type=int, required=True)
    c.add_argument("--state-port", type=int, required=True)
    c.add_argument("--health-interval", type=int, default=1)
    c.add_argument("--worker-timeout", type=int, default=30)
    e = commands.add_parser("engine")
    e.add_argument("--config", required=True, help="the engine's LMCache YAML (controller URLs and worker ports)")
    e.add_argument("--instance", required=True)
    e.add_argument("--ip", required=True)
    args = parser.parse_args()
    controller(args) if args.command == "controller" else engine(args)


if __name__ == "__main__":
    main()
