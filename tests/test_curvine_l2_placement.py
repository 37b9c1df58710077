"""``kvtiers verify`` reports which worker holds the blocks the cross-pod check wrote (node-local placement).

Against the fake API server, whose Curvine master answers ``/api/browse`` and ``/api/block_locations`` as Curvine
v0.4.1's ``curvine-master/src/master/router_handler.rs`` does.
"""

from __future__ import annotations

import time

import pytest
from kubernetes.client import AppsV1Api, CoreV1Api

from kvtiers.cli.verify import crosspod, placement, runner
from tests.fakes import secrets_manager
from tests.fakes.cluster import build_healthy
from tests.fakes.kube_server import FakeKube

FAST = {"metrics_timeout": 0.3, "poll": 0.05}


@pytest.fixture
def world(dev_env, dev_objects):
    with FakeKube() as kube:
        handles = build_healthy(kube, dev_env, dev_objects)
        api = kube.api_client()
        yield kube, handles, api


def checks(env, api) -> dict:
    clients = runner.Clients(sagemaker=None, kube=api, secretsmanager=secrets_manager.for_environment(env))
    results = runner.run(env, clients, show_progress=False, **FAST)
    return {r.name: r for r in results if r.area.startswith("cross-pod:")}


def test_verify_reports_blocks_on_the_writers_node(world, dev_env):
    kube, _handles, api = world
    results = checks(dev_env, api)
    assert results[crosspod.NAME].ok
    check = results[placement.NAME]
    writer = kube.pod("qwen2-7b-engine-0")
    assert check.ok, check
    assert f"qwen2-7b-engine-0 on {writer['spec']['nodeName']} ({writer['status']['hostIP']})" in check.detail
    assert f"{writer['status']['hostIP']}: 2" in check.detail
    # asked the leader's web API, through the API server's proxy
    assert any("/pods/curvine-master-0:9000/proxy/api/block_locations?path=/l2cache/" in p for _, p in kube.log)


def test_verify_fails_when_blocks_land_on_another_worker(world, dev_env):
    _kube, handles, api = world
    handles["placement"]["worker"] = "localhost"  # the v0.4.1 standalone FUSE pod's client hostname
    check = checks(dev_env, api)[placement.NAME]
    assert not check.ok and "localhost: 2" in check.detail
    assert "CURVINE_CLIENT_HOSTNAME" in check.hint and "round-robin" in check.hint


def test_verify_fails_when_nothing_was_written_since_the_check_started(world, dev_env):
    _kube, handles, api = world
    handles["curvine"].write("/l2cache/pvc-1234/old.pt", ["10.0.0.9"])
    handles["curvine"].mtime_ms = 1  # every file is older than the check
    check = placement.check_l2_placement(
        CoreV1Api(api), AppsV1Api(api), api, dev_env, dev_env.serving.endpoints[0], time.time()
    )
    assert not check.ok and "no block written below /l2cache" in check.detail
