"""The environment schema: the shipped files load, and each bad case is rejected with a message naming the file,
the field and what is allowed."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvtiers.config import ConfigError, load_environment, model
from tests.conftest import CONFIG_DIR, ROOT
from tests.synth import refused_by_app

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def write_variant(tmp_path: Path, change) -> Path:
    raw = copy.deepcopy(DEV)
    change(raw)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rejected(tmp_path: Path, change) -> str:
    """What the app refuses the changed dev environment with: the file's own problems, or a construct's refusal of
    the props the file maps onto (the deploy rules are the constructs')."""
    path = write_variant(tmp_path, change)
    message = refused_by_app(path)
    assert message.startswith(f"{path}: "), message
    return message


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_shipped_environment_files_load(name):
    env = load_environment(CONFIG_DIR / name)
    assert env.hyperpod.instance_groups
    assert model.sizing(env) is not None


def test_dev_is_the_source_design(dev_env):
    groups = dev_env.hyperpod.instance_groups
    assert sum(g.count for g in groups) == 2
    assert all(g.instance_type.startswith("ml.g6e.") for g in groups)
    assert dev_env.hyperpod.tiered_storage.enabled and dev_env.hyperpod.tiered_storage.memory_percentage == 20
    assert [e.model for e in dev_env.serving.endpoints] == ["Qwen/Qwen2-7B-Instruct"]
    assert dev_env.account == "111111111111"


def set_path(raw: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value


BAD_CASES = [
    # (field path, value, expected text in the message)
    ("hyperpod.instance_groups.0.instance_type", "ml.g5.12xlarge", "ml.g6e.48xlarge"),
    ("hyperpod.instance_groups.0.instance_type", "ml.g6e.64xlarge", "ml.g6e.xlarge"),
    (
        "hyperpod.tiered_storage.memory_percentage",
        150,
        "HyperPodCluster: tiered_storage_memory_percentage must be 0 to 100",
    ),
    (
        "hyperpod.tiered_storage.memory_percentage",
        -1,
        "HyperPodCluster: tiered_storage_memory_percentage must be 0 to 100",
    ),
    ("hyperpod.cluster_name", "bad_name!", "should match pattern"),
    ("hyperpod.instance_groups.0.name", "-group", "should match pattern"),
    ("name", "Kvtiers_Dev", "should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"),
    ("curvine.namespace", "Curvine", "should match pattern"),
    ("eks.cluster_name", "-eks", "should match pattern"),
    ("eks.kubernetes_version", "1.27", "Kubernetes 1.27 is not a version kvtiers knows; use one of 1.30, 1.31, 1.32"),
    ("eks.kubernetes_version", "1.35", "Kubernetes 1.35 is not documented for SageMaker HyperPod; use one of"),
    ("account", "1234", "should match pattern"),
    ("region", "moon-1", "should match pattern"),
    ("hyperpod.instance_groups.0.threads_per_core", 3, "1 or 2"),
    ("observability.enabled", "sometimes", "valid boolean"),
    ("observability.scrape_interval_seconds", 5, "greater than or equal to 10"),
    ("observability.alert_topic_name", "alerts topic", "should match pattern"),
    ("serving.endpoints.0.ttft_p95_alert_seconds", 0, "greater than 0"),
    ("network.cidr", "fd00::/48", "NewVpcOptions: cidr 'fd00::/48' is not an IPv4 CIDR"),
    ("network.hyperpod_subnet_cidr", "10.192.64.0/33", "NewVpcOptions: hyperpod_subnet_cidr '10.192.64.0/33' is not"),
]


@pytest.mark.parametrize(("field", "value", "expected"), BAD_CASES, ids=[f"{c[0]}={c[1]}" for c in BAD_CASES])
def test_bad_values_name_the_field_and_the_allowed_values(tmp_path, field, value, expected):
    message = rejected(tmp_path, lambda raw: set_path(raw, field, value))
    # The file's own problems name the field; a construct's refusal names the construct and its prop.
    if "invalid environment" in message:
        assert f"  {field}: " in message, message
    assert expected in message, message


def test_unknown_keys_are_rejected_anywhere(tmp_path):
    def change(raw):
        raw["hyperpod"]["tiered_storage"]["memory_percent"] = 20
        raw["typo_at_top"] = 1

    message = rejected(tmp_path, change)
    assert "hyperpod.tiered_storage.memory_percent: unknown key" in message
    assert "typo_at_top: unknown key" in message
    assert "2 problem(s)" in message


def test_missing_required_field(tmp_path):
    message = rejected(tmp_path, lambda raw: raw["hyperpod"].pop("instance_groups"))
    assert "hyperpod.instance_groups: Field required" in message


def test_wrong_type(tmp_path):
    message = rejected(tmp_path, lambda raw: set_path(raw, "hyperpod.instance_groups.0.count", "two"))
    assert "hyperpod.instance_groups.0.count: Input should be a valid integer" in message


def test_network_mode_must_be_new_or_existing(tmp_path):
    message = rejected(tmp_path, lambda raw: set_path(raw, "network.mode", "borrowed"))
    assert "network: " in message and "'new', 'existing'" in message


EXISTING_VPC = {
    "mode": "existing",
    "vpc_id": "vpc-0123456789abcdef0",
    "cidr": "10.0.0.0/16",
    "private_subnet_ids": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    "availability_zones": ["us-east-1a", "us-east-1b"],
    "hyperpod_subnet_id": "subnet-0123456789abcdef2",
    "hyperpod_availability_zone": "us-east-1b",
}


def test_existing_vpc_is_imported_by_ids(tmp_path):
    env = load_environment(write_variant(tmp_path, lambda raw: raw.update(network=dict(EXISTING_VPC))))
    assert env.network.mode == "existing"


def test_allowed_clients_in_an_existing_vpc_need_the_control_plane_subnets(tmp_path):
    """Routers admit the API server's proxy (for ``kvtiers verify``) from the control plane's subnets; without their
    CIDRs that rule must admit the whole VPC, which would void a narrower ``allowed_clients``."""

    def narrow(raw, **network):
        raw["network"] = {**EXISTING_VPC, **network}
        raw["serving"]["endpoints"][0]["allowed_clients"] = ["10.0.200.0/24"]

    # The rule is the router's NetworkPolicy's (ServingNetworkPolicyChart): the app meets it when it builds the chart.
    message = refused_by_app(write_variant(tmp_path, narrow))
    assert "client_cidrs 10.0.200.0/24 narrow who may call the router" in message
    assert "ExistingVpcAttributes(private_subnet_cidrs=...)" in message
    env = load_environment(
        write_variant(tmp_path, lambda raw: narrow(raw, private_subnet_cidrs=["10.0.1.0/24", "10.0.2.0/24"]))
    )
    assert env.network.private_subnet_cidrs == ("10.0.1.0/24", "10.0.2.0/24")
    message = refused_by_app(write_variant(tmp_path, lambda raw: narrow(raw, private_subnet_cidrs=["10.0.1.0/24"])))
    assert "private_subnet_cidrs must list one CIDR per entry of private_subnet_ids" in message


def test_an_existing_vpcs_load_balancer_subnets_reach_the_construct(tmp_path):
    """The rule is ExistingVpcAttributes': the app reports its message, naming the field."""
    env = load_environment(
        write_variant(
            tmp_path, lambda raw: raw.update(network={**EXISTING_VPC, "load_balancer_subnet_cidrs": ["10.0.200.0/24"]})
        )
    )
    assert env.network.load_balancer_subnet_cidrs == ("10.0.200.0/24",)
    outside = {**EXISTING_VPC, "load_balancer_subnet_cidrs": ["10.9.0.0/24"]}
    message = refused_by_app(write_variant(tmp_path, lambda raw: raw.update(network=outside)))
    assert "load_balancer_subnet_cidrs 10.9.0.0/24 is not inside cidr 10.0.0.0/16" in message


def test_hyperpod_subnet_outside_the_vpc(tmp_path):
    message = rejected(tmp_path, lambda raw: set_path(raw, "network.hyperpod_subnet_cidr", "10.1.0.0/16"))
    assert "network: Value error, hyperpod_subnet_cidr 10.1.0.0/16 is not inside cidr 10.192.0.0/16" in message or (
        "hyperpod_subnet_cidr 10.1.0.0/16 is not inside cidr 10.192.0.0/16" in message
    )


def test_vpc_cni_older_than_hyperpod_minimum(tmp_path):
    message = rejected(
        tmp_path, lambda raw: set_path(raw, "eks", {**raw["eks"], "addons": {"vpc_cni": "v1.18.2-eksbuild.1"}})
    )
    assert "CoreAddonVersions: vpc_cni v1.18.2-eksbuild.1 is older than v1.18.3" in message


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="no such environment file"):
        load_environment(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_environment(bad)
    bad.write_text("- a list")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_environment(bad)


def test_synth_with_a_bad_file_exits_non_zero_without_a_traceback(tmp_path):
    path = write_variant(tmp_path, lambda raw: set_path(raw, "hyperpod.tiered_storage.enabled", "sometimes"))
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={
            "CDK_CONTEXT_JSON": f'{{"config": "{path}"}}',
            "CDK_OUTDIR": str(tmp_path / "out"),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: {path}: invalid environment" in result.stderr
    assert "hyperpod.tiered_storage.enabled: Input should be a valid boolean" in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()
