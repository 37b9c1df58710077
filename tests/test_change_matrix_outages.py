"""Outages a node change or a deletion causes are warnings or errors, not only table text: prod's Curvine worker
group on another instance type (every master stops: no Raft quorum, the L2 down for every endpoint; every
qwen25-32b engine stops), dev's only Curvine master on a node that goes, and a renamed endpoint's router Service (the
in-cluster name clients call) deleted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvtiers.change.report import EnvironmentChange, assembly_change
from tests.change_variants import shipped_file
from tests.test_change_matrix import _rename
from tests.test_change_matrix_nodes import PAIRS, _group


def _mid_instance_type(raw: dict) -> None:
    _group(raw, "g6e-mid")["instance_type"] = "ml.g6e.24xlarge"


def _dev_one_node(raw: dict) -> None:
    _group(raw, "g6e-serving")["count"] = 1


OUTAGE_PAIRS: dict[str, tuple[str, Callable[[dict], None], Callable[[dict], None]]] = {
    "prod-mid-type": ("prod", shipped_file, _mid_instance_type),
    "dev-scale-down": ("dev", shipped_file, _dev_one_node),
    "dev-instance-type": PAIRS["instance-type"],
    "dev-rename": ("dev", shipped_file, _rename),
}


@pytest.fixture(scope="module")
def changes(environment_assemblies) -> dict[str, EnvironmentChange]:
    found = {}
    for name, (env, before, after) in OUTAGE_PAIRS.items():
        folders: tuple[Path, Path] = (
            environment_assemblies.edited(env, before),
            environment_assemblies.edited(env, after),
        )
        found[name] = assembly_change(name, *folders)
    return found


def test_every_curvine_master_stopping_is_a_warning_that_the_l2_is_down(changes):
    (warning,) = [w for w in changes["prod-mid-type"].warnings if "Curvine master" in w]
    assert warning.startswith("g6e-mid: up to 3 of 3 Curvine master(s) stop")
    assert "no Raft quorum" in warning and "the L2 is down for every endpoint" in warning


def test_the_instance_type_change_stops_every_engine_of_an_endpoint_a_warning(changes):
    (warning,) = [w for w in changes["prod-mid-type"].warnings if "qwen25-32b" in w]
    assert warning.startswith("g6e-mid: all 3 engine pod(s) of qwen25-32b stop at once")
    assert "outage" in warning


@pytest.mark.parametrize("name", ["dev-scale-down", "dev-instance-type"])
def test_dev_losing_its_only_master_is_a_warning(changes, name):
    (warning,) = [w for w in changes[name].warnings if "Curvine master" in w]
    assert warning.startswith("g6e-serving: up to 1 of 1 Curvine master(s) stop")
    assert "the L2 is down for every endpoint" in warning


def test_a_scale_down_that_keeps_an_engine_of_each_endpoint_warns_of_no_engine_outage(changes):
    assert not [w for w in changes["dev-scale-down"].warnings if "engine pod(s)" in w]
    assert [w for w in changes["dev-instance-type"].warnings if w.startswith("g6e-serving: all 2 engine pod(s)")]


def test_a_renamed_endpoint_deletes_its_router_service_the_name_clients_call(changes):
    change = changes["dev-rename"]
    (error,) = [e for e in change.errors if e.startswith("deleted: Service serving/qwen2-7b-router ")]
    assert "qwen2-7b-router.serving.svc" in error and "intended_deletions" in error
    (deleted,) = [d for d in change.deletions.deleted if d.target == "Service serving/qwen2-7b-router"]
    assert deleted.loses and deleted.intended is None
    assert not [d for d in change.deletions.deleted if d.target == "Service serving/qwen2-7b-engine" and d.loses]


def test_a_system_node_group_replacement_warns_of_the_single_kvaware_router(environment_assemblies):
    env, before, after = PAIRS["system-nodes"]
    change = assembly_change(
        "system-nodes", environment_assemblies.edited(env, before), environment_assemblies.edited(env, after)
    )
    (warning,) = [w for w in change.warnings if "has no router" in w]
    assert "Deployment.apps serving/llama31-70b-router has one pod" in warning and "outage" in warning
