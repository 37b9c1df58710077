"""Changes whose effect crosses stacks, on real synths of both example environments: the network, platform and
workloads stacks deploy one after the other, each reading the earlier ones' outputs with ``Fn::GetStackOutput``.

- a new VPC CIDR or HyperPod subnet CIDR replaces subnets (and security groups) in the network stack; the HyperPod
  cluster reads them, its ``VpcConfig`` is create-only and its name custom, so its replacement fails; the platform
  template does not change, so ``cdk deploy`` skips it and the cluster stays on the old subnet meanwhile;
- an endpoint's API key switched off deletes the secrets-store add-on in the platform stack while the workloads
  stack's old engine and router pods still mount the driver's volume;
- kvaware -> session routing deletes the LMCache controller and worker port rules in the platform stack while the
  old kvaware router and engines still serve on those ports.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvtiers.change.cloudformation import CfnAction
from kvtiers.change.report import EnvironmentChange
from tests.test_change_matrix import variant_changes


def _network_cidr(raw: dict) -> None:
    raw["network"].update(cidr="10.193.0.0/16", hyperpod_subnet_cidr="10.193.64.0/18")


def _hyperpod_subnet(raw: dict) -> None:
    raw["network"]["hyperpod_subnet_cidr"] = "10.192.128.0/18"


def _api_key_off(raw: dict) -> None:
    raw["serving"]["endpoints"][0]["api_key"] = False


def _kvaware_to_session(raw: dict) -> None:
    endpoint = next(e for e in raw["serving"]["endpoints"] if e["routing"] == "kvaware")
    endpoint.update(routing="session", session_key="x-session-id")


VARIANTS: dict[str, dict[str, Callable[[dict], None]]] = {
    "dev": {"network-cidr": _network_cidr, "hyperpod-subnet": _hyperpod_subnet, "api-key-off": _api_key_off},
    "prod": {"kvaware-to-session": _kvaware_to_session},
}


@pytest.fixture(scope="module")
def changes(environment_assemblies) -> dict[tuple[str, str], EnvironmentChange]:
    return variant_changes(
        environment_assemblies, {(env, name): edit for env, named in VARIANTS.items() for name, edit in named.items()}
    )


@pytest.mark.parametrize("name", ["network-cidr", "hyperpod-subnet"])
def test_a_new_subnet_cidr_fails_the_hyperpod_cluster_replacement_in_the_platform_stack(changes, name):
    change = changes["dev", name]
    cluster = next(c for c in change.resources if c.type == "AWS::SageMaker::Cluster")
    assert (cluster.stack, cluster.action) == ("kvtiers-dev-platform", CfnAction.REPLACE)
    assert any("VpcConfig/Subnets" in b and "kvtiers-dev-network" in b for b in cluster.because)
    assert f"kvtiers-dev-platform {cluster.logical_id} (AWS::SageMaker::Cluster): replacing a custom-named" in (
        "\n".join(change.errors)
    )
    (stale,) = [e for e in change.errors if e.startswith("kvtiers-dev-platform is not deployed")]
    assert cluster.logical_id in stale
    subnet = next(c for c in change.resources if c.type == "AWS::EC2::Subnet" and "HyperPod" in c.logical_id)
    assert [w for w in change.warnings if f"takes away the old {subnet.logical_id}" in w and cluster.logical_id in w]
    # The journal volumes read the subnet's zone, which the unchanged zone ID fixes: they are not touched.
    assert not [c for c in change.resources if c.type == "AWS::EC2::Volume"]


def test_an_api_key_switched_off_deletes_the_secrets_driver_before_the_workloads_roll_their_pods(changes):
    change = changes["dev", "api-key-off"]
    addon = next(c for c in change.resources if c.type == "AWS::EKS::Addon")
    assert (addon.stack, addon.action) == ("kvtiers-dev-platform", CfnAction.DELETE)
    (warning,) = [w for w in change.warnings if "the CSI driver secrets-store.csi.k8s.io" in w]
    assert warning.startswith("kvtiers-dev-platform takes away") and "kvtiers-dev-workloads" in warning
    assert "serving/qwen2-7b-engine" in warning and "serving/qwen2-7b-router" in warning


def test_kvaware_to_session_deletes_the_lmcache_port_rules_before_the_router_and_engines_roll(changes):
    change = changes["prod", "kvaware-to-session"]
    deleted = {c.logical_id for c in change.resources if c.action is CfnAction.DELETE}
    assert {i for i in deleted if i.startswith(("NodeTrafficToHyperPodTcp8001", "NodeTrafficToSystemTcp9000"))}
    ports = [w for w in change.warnings if "takes away the security-group ingress" in w]
    engine = next(w for w in ports if "serving/llama31-70b-engine" in w)
    router = next(w for w in ports if "serving/llama31-70b-router" in w)
    assert "TCP 8001" in engine and "TCP 9000" in router
    assert all(w.startswith("kvtiers-prod-platform takes away") and "kvtiers-prod-workloads" in w for w in ports)
