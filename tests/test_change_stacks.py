"""The stacks deploy one after the other (``cdk deploy --all``): the change model over small hand-written templates.

What CloudFormation and the CDK CLI do, with their sources in docs/change-contract.md: ``Fn::GetStackOutput`` is
resolved when the reading stack is created or updated (a weak reference), an export another stack imports cannot
change, the CLI deploys each stack after the stacks its manifest.json artifact depends on and skips a stack whose
template is unchanged (aws-cdk 2.1148.1 ``canSkipDeploy``), and each stack's cleanup deletes come before the next
stack starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtiers.change.cloudformation import CfnAction, resource_changes
from kvtiers.change.deploy import deploy
from kvtiers.change.manifests import AssemblyError, load_templates
from kvtiers.change.report import assembly_change, environment_change
from kvtiers.cli.main import app
from tests.test_change_model import manifest, obj

NETWORK, PLATFORM, WORKLOADS = "env-network", "env-platform", "env-workloads"
SUBNET_OUTPUT = "PublishOutputRefSubnet"
ZONE_OUTPUT = "PublishOutputFnGetAttSubnetAvailabilityZone"


def _network(cidr: str, *, export: bool = False) -> dict:
    subnet = {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": cidr, "AvailabilityZoneId": "use1-az2"}}
    outputs: dict = {
        SUBNET_OUTPUT: {"Value": {"Ref": "Subnet"}},
        ZONE_OUTPUT: {"Value": {"Fn::GetAtt": ["Subnet", "AvailabilityZone"]}},
    }
    if export:
        outputs[SUBNET_OUTPUT]["Export"] = {"Name": f"{NETWORK}:Subnet"}
    return {"Resources": {"Subnet": subnet}, "Outputs": outputs}


def _read(output: str) -> dict:
    return {"Fn::GetStackOutput": {"StackName": NETWORK, "Region": "us-east-1", "OutputName": output}}


def _hyperpod(subnet: dict, *, zone: dict | None = None) -> dict:
    cluster = {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {"ClusterName": "env", "VpcConfig": {"Subnets": [subnet], "SecurityGroupIds": ["sg-1"]}},
    }
    resources = {"HyperPodCluster": cluster}
    if zone is not None:
        resources["Journal"] = {"Type": "AWS::EC2::Volume", "Properties": {"AvailabilityZone": zone, "Size": 10}}
    return {"Resources": resources}


def test_a_subnet_replaced_in_the_network_stack_replaces_the_custom_named_cluster_that_reads_it_and_fails():
    before = {NETWORK: _network("10.0.0.0/18"), PLATFORM: _hyperpod(_read(SUBNET_OUTPUT))}
    after = {NETWORK: _network("10.0.64.0/18"), PLATFORM: _hyperpod(_read(SUBNET_OUTPUT))}
    changes = {c.logical_id: c for c in resource_changes(before, after)}
    assert changes["Subnet"].action is CfnAction.REPLACE
    cluster = changes["HyperPodCluster"]
    assert (cluster.stack, cluster.action) == (PLATFORM, CfnAction.REPLACE)
    assert cluster.error and "custom-named" in cluster.error
    assert f"output {SUBNET_OUTPUT} of {NETWORK}: Subnet replaced" in cluster.because[0]


def test_an_export_another_stack_imports_cannot_change_so_the_update_fails_and_nothing_cascades():
    """CloudFormation's ``Fn::ImportValue`` restrictions: an imported output value cannot be modified."""
    imported = {"Fn::ImportValue": f"{NETWORK}:Subnet"}
    before = {NETWORK: _network("10.0.0.0/18", export=True), PLATFORM: _hyperpod(imported)}
    after = {NETWORK: _network("10.0.64.0/18", export=True), PLATFORM: _hyperpod(imported)}
    changes = {c.logical_id: c for c in resource_changes(before, after)}
    failed = changes[SUBNET_OUTPUT]
    assert (failed.stack, failed.action) == (NETWORK, CfnAction.FAIL)
    assert failed.error and PLATFORM in failed.error and "export in use" in failed.error
    assert "HyperPodCluster" not in changes


def test_the_zone_of_a_subnet_replaced_in_the_same_zone_keeps_its_value():
    """``Fn::GetAtt [Subnet, AvailabilityZone]`` is fixed by the unchanged ``AvailabilityZoneId``: the volume that
    reads it is not touched, while the cluster that reads the subnet ID is replaced."""
    platform = _hyperpod(_read(SUBNET_OUTPUT), zone=_read(ZONE_OUTPUT))
    before = {NETWORK: _network("10.0.0.0/18"), PLATFORM: platform}
    after = {NETWORK: _network("10.0.64.0/18"), PLATFORM: platform}
    touched = {c.logical_id for c in resource_changes(before, after)}
    assert touched == {"Subnet", "HyperPodCluster"}


def test_a_stack_whose_template_is_unchanged_is_not_deployed_and_keeps_the_old_values():
    platform = _hyperpod(_read(SUBNET_OUTPUT))
    change = environment_change(
        "env",
        {NETWORK: _network("10.0.0.0/18"), PLATFORM: platform},
        {NETWORK: _network("10.0.64.0/18"), PLATFORM: platform},
        None,
        None,
    )
    stale = [e for e in change.errors if e.startswith(f"{PLATFORM} is not deployed")]
    assert len(stale) == 1 and "HyperPodCluster" in stale[0] and "Subnet replaced" in stale[0]
    (in_use,) = [w for w in change.warnings if "takes away the old Subnet" in w]
    assert in_use.startswith(f"{NETWORK} takes away") and f"HyperPodCluster (output {SUBNET_OUTPUT})" in in_use


def _assembly(folder: Path, stacks: dict[str, list[str]]) -> Path:
    """A cloud assembly whose manifest.json lists ``stacks`` (name: dependencies) in the order given."""
    artifacts = {}
    for name, dependencies in stacks.items():
        (folder / f"{name}.template.json").write_text(json.dumps({"Resources": {}}))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{name}.template.json"},
            "dependencies": [*dependencies, f"{name}.assets"],
        }
        artifacts[f"{name}.assets"] = {"type": "cdk:asset-manifest"}
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    (folder / "other-env-network.template.json").write_text(json.dumps({"Resources": {}}))
    return folder


def test_the_stacks_load_in_the_order_of_the_manifest_dependencies_and_only_the_manifests_stacks(tmp_path):
    folder = _assembly(
        tmp_path, {"z-workloads": ["m-platform", "a-network"], "m-platform": ["a-network"], "a-network": []}
    )
    assert list(load_templates(folder)) == ["a-network", "m-platform", "z-workloads"]
    folder = _assembly(tmp_path, {"b-first": [], "a-second": ["b-first"]})
    assert list(load_templates(folder)) == ["b-first", "a-second"]


def _manifests(*resources: tuple[str, dict]) -> dict:
    return {"Resources": dict(resources)}


def test_an_object_moved_to_a_later_stack_is_deleted_by_the_earlier_stacks_cleanup_first_then_created():
    config = obj("v1", "ConfigMap", "shared", data={"a": "1"})
    before = {PLATFORM: _manifests(manifest("Old", [dict(config)])), WORKLOADS: _manifests()}
    after = {PLATFORM: _manifests(), WORKLOADS: _manifests(manifest("New", [dict(config)]))}
    outcome = deploy(before, after)
    assert outcome.lost == ()
    assert [(c.stack, c.action.value) for c in outcome.changes] == [(PLATFORM, "delete"), (WORKLOADS, "create")]


def test_an_object_moved_to_an_earlier_stack_is_lost_to_the_later_stacks_cleanup():
    config = obj("v1", "ConfigMap", "shared", data={"a": "1"})
    before = {PLATFORM: _manifests(), WORKLOADS: _manifests(manifest("Old", [dict(config)]))}
    after = {PLATFORM: _manifests(manifest("New", [dict(config)])), WORKLOADS: _manifests()}
    assert [str(r) for r in deploy(before, after).lost] == ["ConfigMap serving/shared"]


def _secrets_addon() -> tuple[str, dict]:
    props = {"AddonName": "aws-secrets-store-csi-driver-provider", "ClusterName": {"Ref": "Cluster"}}
    return "SecretsAddon", {"Type": "AWS::EKS::Addon", "Properties": props}


def _engine(*, secrets: bool, ports: tuple[int, ...] = (8000,)) -> dict:
    volumes = [{"name": "keys", "csi": {"driver": "secrets-store.csi.k8s.io"}}] if secrets else []
    container = {"name": "vllm", "image": "v", "ports": [{"containerPort": p} for p in ports]}
    return obj("apps/v1", "Deployment", "engine", template={"spec": {"containers": [container], "volumes": volumes}})


def test_an_add_on_the_platform_deletes_while_the_workloads_old_pods_mount_its_csi_driver_is_a_warning():
    before = {
        PLATFORM: _manifests(_secrets_addon()),
        WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=True)])),
    }
    after = {PLATFORM: _manifests(), WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=False)]))}
    change = environment_change("env", before, after, None, None)
    (warning,) = [w for w in change.warnings if "takes away" in w]
    assert warning.startswith(f"{PLATFORM} takes away the CSI driver secrets-store.csi.k8s.io while {WORKLOADS}")
    assert "Deployment.apps serving/engine" in warning and "Terminating" in warning


def test_a_csi_driver_the_workloads_keep_using_is_not_an_ordering_warning():
    """The new pods still mount it: not a matter of order (and the add-on is not deleted here)."""
    workloads = _manifests(manifest("Engine", [_engine(secrets=True)]))
    before = {PLATFORM: _manifests(_secrets_addon()), WORKLOADS: workloads}
    after = {PLATFORM: _manifests(_secrets_addon(), ("Other", {"Type": "AWS::SNS::Topic"})), WORKLOADS: workloads}
    assert not [w for w in environment_change("env", before, after, None, None).warnings if "takes away" in w]


def _ingress(port: int, group: str = "HyperPodGroup", source: str = "SystemGroup", protocol: str = "tcp") -> dict:
    props = {
        "GroupId": {"Fn::GetAtt": [group, "GroupId"]},
        "SourceSecurityGroupId": {"Fn::GetAtt": [source, "GroupId"]},
        "IpProtocol": protocol,
        "FromPort": port,
        "ToPort": port,
    }
    return {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": props}


def test_an_ingress_rule_the_platform_deletes_while_old_pods_declare_its_port_is_a_warning():
    """Another pair's all-traffic rule (within the HyperPod group) does not stand in for the deleted one."""
    within = _ingress(-1, source="HyperPodGroup", protocol="-1")
    before = {
        PLATFORM: _manifests(("Lmcache8001", _ingress(8001)), ("Within", within)),
        WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=False, ports=(8000, 8001))])),
    }
    after = {
        PLATFORM: _manifests(("Within", within)),
        WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=False, ports=(8000,))])),
    }
    (warning,) = [w for w in environment_change("env", before, after, None, None).warnings if "takes away" in w]
    assert warning.startswith(f"{PLATFORM} takes away the security-group ingress for TCP 8001 while {WORKLOADS}")


def test_an_ingress_rule_replaced_by_an_equal_one_under_another_logical_id_takes_nothing_away():
    before = {
        PLATFORM: _manifests(("Lmcache8001", _ingress(8001))),
        WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=False, ports=(8001,))])),
    }
    after = {
        PLATFORM: _manifests(("Renamed8001", _ingress(8001))),
        WORKLOADS: _manifests(manifest("Engine", [_engine(secrets=False, ports=(8000,))])),
    }
    assert not [w for w in environment_change("env", before, after, None, None).warnings if "takes away" in w]


def _named_assembly(folder: Path, templates: dict[str, dict]) -> Path:
    """An assembly whose stacks' CloudFormation names (the dict's keys) differ from their artifact ids, as a construct
    user's ``Stack(app, "Net", stack_name="team-net")``: the files are named by the id."""
    folder.mkdir()
    artifacts = {}
    for number, (name, template) in enumerate(templates.items()):
        artifact = f"Stack{number}"
        (folder / f"{artifact}.template.json").write_text(json.dumps(template))
        artifacts[artifact] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{artifact}.template.json", "stackName": name},
            "dependencies": [f"Stack{number - 1}"] if number else [],
        }
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder


def test_stacks_are_named_as_cloudformation_names_them_so_a_reference_across_them_is_followed(tmp_path):
    """``Fn::GetStackOutput`` names the stack's CloudFormation name, not its construct id."""
    platform = _hyperpod(_read(SUBNET_OUTPUT))
    before = _named_assembly(tmp_path / "before", {NETWORK: _network("10.0.0.0/18"), PLATFORM: platform})
    after = _named_assembly(tmp_path / "after", {NETWORK: _network("10.0.64.0/18"), PLATFORM: platform})
    assert list(load_templates(after)) == [NETWORK, PLATFORM]
    change = assembly_change("team", before, after)
    assert [e for e in change.errors if e.startswith(f"{PLATFORM} is not deployed")], change.errors


def test_an_assembly_whose_stacks_are_in_a_stage_is_refused_with_where_they_are(tmp_path):
    """A ``cdk.Stage`` puts its stacks in a nested assembly: read as it is, the assembly has no stacks and every
    change would read as none."""
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "artifacts": {
                    "assembly-Prod": {"type": "cdk:cloud-assembly", "properties": {"directoryName": "assembly-Prod"}}
                }
            }
        )
    )
    with pytest.raises(AssemblyError, match=r"nested assemblies \(assembly-Prod: a cdk.Stage\).*/assembly-Prod"):
        load_templates(tmp_path)
    result = CliRunner().invoke(app, ["diff", "--before", str(tmp_path), "--after", str(tmp_path)])
    assert result.exit_code == 2 and "nested assemblies" in result.output, result.output


def test_stacks_of_one_name_in_two_regions_are_refused_not_merged(tmp_path):
    """``Stack(app, "NetUS", stack_name="team-net")`` beside ``Stack(app, "NetEU", stack_name="team-net")`` in
    another region: keyed by name, one would hide the other's changes."""
    artifacts = {
        artifact: {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{artifact}.template.json", "stackName": "team-net"},
        }
        for artifact in ("NetUS", "NetEU")
    }
    for artifact in artifacts:
        (tmp_path / f"{artifact}.template.json").write_text(json.dumps({"Resources": {}}))
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    with pytest.raises(AssemblyError, match=r"\['team-net'\] share a CloudFormation name"):
        load_templates(tmp_path)
