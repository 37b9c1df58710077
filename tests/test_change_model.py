"""The change model (kvtiers.change): what deploying one synth after another leaves on the cluster.

The kubectl facts are tested on hand-written manifests with what kubectl v1.34.5 and aws-cdk-lib 2.275.0's handler
do (kubectl ``pkg/util/prune/prune.go`` and ``pkg/cmd/apply/prune.go`` at v0.34.5; the handler's
``apply/__init__.py``); then prod is synthesized twice and the model run over the real templates: an operator
endpoint change that renames the InferenceEndpointConfig must leave no orphan, where the old design (stable
logical IDs) left the old endpoint and its policy running.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from kvtiers.change import Action, ObjectRef, deploy, first_deploy, load_templates
from tests.conftest import CONFIG_DIR

CLUSTER = {"Ref": "Cluster"}


def manifest(logical_id: str, objects: list[dict], *, prune: bool = True) -> tuple[str, dict]:
    label = f"aws.cdk.eks/prune-{logical_id.lower()}"
    for obj in objects:
        if prune:
            obj.setdefault("metadata", {}).setdefault("labels", {})[label] = ""
    properties = {"ServiceToken": "x", "Manifest": json.dumps(objects), "ClusterName": CLUSTER, "Overwrite": True}
    if prune:
        properties["PruneLabel"] = label
    return logical_id, {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": properties}


def stack(*resources: tuple[str, dict]) -> dict[str, dict]:
    return {"s": {"Resources": dict(resources)}}


def obj(api_version: str, kind: str, name: str, namespace: str | None = "serving", **spec) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def test_an_update_prunes_a_removed_deployment_but_not_a_removed_custom_resource_or_network_policy():
    before = stack(
        manifest(
            "App",
            [
                obj("apps/v1", "Deployment", "web"),
                obj("networking.k8s.io/v1", "NetworkPolicy", "web"),
                obj("kyverno.io/v1", "Policy", "web-l2"),
                obj("v1", "Service", "web"),
            ],
        )
    )
    after = stack(manifest("App", [obj("v1", "Service", "web", ports=[1])]))
    outcome = deploy(before, after)
    assert outcome.change("App").action is Action.UPDATE
    assert {str(r) for r in outcome.change("App").deleted} == {"Deployment.apps serving/web"}
    assert {str(r) for r in outcome.orphans} == {
        "NetworkPolicy.networking.k8s.io serving/web",
        "Policy.kyverno.io serving/web-l2",
    }


def test_without_a_prune_label_nothing_is_pruned():
    before = stack(manifest("App", [obj("apps/v1", "Deployment", "a"), obj("apps/v1", "Deployment", "b")], prune=False))
    after = stack(manifest("App", [obj("apps/v1", "Deployment", "a")], prune=False))
    assert [str(r) for r in deploy(before, after).orphans] == ["Deployment.apps serving/b"]


def test_prune_stays_in_the_namespaces_of_the_applied_objects():
    before = stack(
        manifest("App", [obj("v1", "ConfigMap", "a", namespace="one"), obj("v1", "ConfigMap", "b", namespace="two")])
    )
    after = stack(manifest("App", [obj("v1", "ConfigMap", "a", namespace="one", data=1)]))
    assert [str(r) for r in deploy(before, after).orphans] == ["ConfigMap two/b"]


def test_an_unchanged_resource_is_not_touched_and_a_removed_logical_id_is_deleted_after_the_update():
    keep = manifest("Keep", [obj("v1", "Service", "keep")])
    before = stack(keep, manifest("Old", [obj("kyverno.io/v1", "Policy", "old")]))
    after = stack(keep, manifest("New", [obj("kyverno.io/v1", "Policy", "new")]))
    outcome = deploy(before, after)
    assert [(c.logical_id, c.action) for c in outcome.changes] == [("New", Action.CREATE), ("Old", Action.DELETE)]
    assert outcome.orphans == () and outcome.lost == ()


def test_moving_an_object_to_a_new_logical_id_loses_it_when_the_old_resource_is_deleted():
    # The new resource's create applies the object; the cleanup delete of the old manifest then deletes it by name.
    before = stack(manifest("Old", [obj("v1", "Service", "web")]))
    after = stack(manifest("New", [obj("v1", "Service", "web")]))
    assert [str(r) for r in deploy(before, after).lost] == ["Service serving/web"]


@pytest.mark.parametrize(("policy", "lost"), [("Retain", []), ("Delete", ["Namespace team", "Service team/web"])])
def test_a_retained_manifest_leaving_the_stack_deletes_nothing(policy, lost):
    """CloudFormation sends no Delete for a removed resource with ``DeletionPolicy: Retain``; the handler's Delete
    branch (``kubectl delete -f``) would take the namespace and all in it."""
    logical_id, namespace = manifest("Ns", [obj("v1", "Namespace", "team", namespace=None)])
    service = manifest("Web", [obj("v1", "Service", "web", namespace="team")])
    before = stack((logical_id, {**namespace, "DeletionPolicy": policy}), service)
    after = stack(manifest("TeamNs", [obj("v1", "Namespace", "team", namespace=None)]), service)
    assert [str(r) for r in deploy(before, after).lost] == lost


def test_a_deleted_namespace_takes_its_objects_with_it():
    before = stack(
        manifest("Ns", [obj("v1", "Namespace", "team", namespace=None)]),
        manifest("App", [obj("v1", "ConfigMap", "c", namespace="team")]),
    )
    after = stack(manifest("App", [obj("v1", "ConfigMap", "c", namespace="team")]))
    assert [str(r) for r in deploy(before, after).lost] == ["ConfigMap team/c"]


def test_pruning_a_renamed_namespace_takes_its_objects_and_leaves_no_orphan():
    # serving.namespace changed: the namespace manifest's prune deletes the old Namespace, and the namespace
    # controller deletes everything in it.
    before = stack(
        manifest("Ns", [obj("v1", "Namespace", "team", namespace=None)]),
        manifest("App", [obj("v1", "ConfigMap", "c", namespace="team"), obj("v1", "ServiceAccount", "sa", "team")]),
    )
    after = stack(
        manifest("Ns", [obj("v1", "Namespace", "team2", namespace=None)]),
        manifest("App", [obj("v1", "ConfigMap", "c", namespace="team2"), obj("v1", "ServiceAccount", "sa", "team2")]),
    )
    outcome = deploy(before, after)
    assert outcome.orphans == () and outcome.lost == ()
    assert {str(r) for r in outcome.change("Ns").deleted} == {
        "Namespace team",
        "ConfigMap team/c",
        "ServiceAccount team/sa",
    }


def test_a_namespace_pruned_by_one_manifest_and_applied_by_another_loses_what_is_in_it():
    # The old manifest's prune deletes the Namespace (it carries that manifest's label); the new manifest's apply
    # then meets a terminating namespace, which the API server refuses to create objects in.
    before = stack(
        manifest("Old", [obj("v1", "Namespace", "team", namespace=None), obj("v1", "ConfigMap", "a", "other")]),
        manifest("App", [obj("v1", "ConfigMap", "c", namespace="team")]),
    )
    after = stack(
        manifest("Old", [obj("v1", "ConfigMap", "a", "other", data=1)]),
        manifest("App", [obj("v1", "Namespace", "team", namespace=None), obj("v1", "ConfigMap", "c", "team", d=1)]),
    )
    outcome = deploy(before, after)
    assert {str(r) for r in outcome.lost} == {"Namespace team", "ConfigMap team/c"}


def test_an_orphan_says_why_it_stays():
    from kvtiers.change.deploy import orphan_reason

    before = stack(
        manifest("App", [obj("networking.k8s.io/v1", "NetworkPolicy", "p"), obj("v1", "ConfigMap", "c", "two")])
    )
    after = stack(manifest("App", [obj("v1", "ConfigMap", "x", "one")]))
    outcome = deploy(before, after)
    reasons = {str(r): orphan_reason(r, outcome) for r in outcome.orphans}
    assert "prune list" in reasons["NetworkPolicy.networking.k8s.io serving/p"]
    assert "prune list" not in reasons["ConfigMap two/c"]
    assert "namespace two" in reasons["ConfigMap two/c"]


def test_object_refs_ignore_the_version():
    assert ObjectRef.of(obj("kyverno.io/v1", "Policy", "p")) == ObjectRef.of(obj("kyverno.io/v2beta1", "Policy", "p"))


# --------------------------------------------------------------------------------------------------- prod, synthesized


def _prod_synth(tmp_path, change):
    from tests.synth import synth

    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    change(next(e for e in raw["serving"]["endpoints"] if e.get("serving") == "operator"))
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_templates(synth(path, tmp_path / "cdk.out").outdir)


@pytest.fixture(scope="module")
def prod_templates(tmp_path_factory):
    """prod as shipped, then with a new L1 size for the operator endpoint (a rename: the L1 size is in the worker
    environment), then with one replica less (no rename)."""
    return {
        name: _prod_synth(tmp_path_factory.mktemp(name), change)
        for name, change in {
            "shipped": lambda e: None,
            "new_l1": lambda e: e.update(l1_gib=e["l1_gib"] + 4),
            "fewer_replicas": lambda e: e.update(replicas=e["replicas"] - 1),
        }.items()
    }


FINGERPRINTED = re.compile(
    r"^OperatorQwen27bChat(OperatorEndpoint|L2Policy|L2PolicyReady)(Qwen27bChat)[0-9a-f]{8}[0-9A-F]{8}$"
)
"""A fingerprinted logical ID: construct ID (with the fingerprint) and CDK's hash of the construct path."""


def old_design(templates: dict) -> dict:
    """The same templates with the logical IDs of the design before the fix: the fingerprint not in them."""
    templates = copy.deepcopy(templates)
    for template in templates.values():
        renamed = {FINGERPRINTED.sub(r"Operator\2\1\2Stable", k): v for k, v in template["Resources"].items()}
        text = json.dumps(renamed)
        for old, new in zip(template["Resources"], renamed, strict=True):
            text = text.replace(f'"{old}"', f'"{new}"')
        template["Resources"] = json.loads(text)
    return templates


def iec_and_policies(refs) -> set[str]:
    return {str(r) for r in refs if r.kind in ("InferenceEndpointConfig", "Policy")}


def test_the_first_deploy_leaves_exactly_the_declared_objects(prod_templates):
    outcome = first_deploy(prod_templates["shipped"])
    assert outcome.orphans == () and outcome.lost == ()
    assert len(iec_and_policies(outcome.cluster.objects)) == 2


def test_old_design_a_renaming_change_leaves_the_old_endpoint_and_policy_running(prod_templates):
    before, after = old_design(prod_templates["shipped"]), old_design(prod_templates["new_l1"])
    outcome = deploy(before, after)
    old_names = iec_and_policies(first_deploy(before).cluster.objects)
    assert old_names and iec_and_policies(outcome.orphans) == old_names


def test_a_renaming_change_replaces_the_endpoint_and_policy_and_leaves_no_orphan(prod_templates):
    before, after = prod_templates["shipped"], prod_templates["new_l1"]
    outcome = deploy(before, after)
    assert outcome.orphans == () and outcome.lost == ()
    created = {c.logical_id for c in outcome.changes if c.action is Action.CREATE}
    deleted = {c.logical_id for c in outcome.changes if c.action is Action.DELETE}
    kinds = {"OperatorEndpoint", "L2Policy"}
    assert {FINGERPRINTED.match(i).group(1) for i in created} == kinds
    assert {FINGERPRINTED.match(i).group(1) for i in deleted} == kinds
    old = iec_and_policies(first_deploy(before).cluster.objects)
    new = iec_and_policies(outcome.cluster.objects)
    assert old.isdisjoint(new) and len(new) == 2


def test_a_change_that_keeps_the_name_updates_the_endpoint_in_place(prod_templates):
    outcome = deploy(prod_templates["shipped"], prod_templates["fewer_replicas"])
    assert outcome.orphans == () and outcome.lost == ()
    (endpoint,) = [
        c for c in outcome.changes if c.logical_id.startswith("OperatorQwen27bChatOperatorEndpointQwen27bChat")
    ]
    assert endpoint.action is Action.UPDATE
    assert not [c for c in outcome.changes if c.action in (Action.CREATE, Action.DELETE)]


def test_deploying_the_same_synth_again_changes_nothing(prod_templates):
    assert deploy(prod_templates["shipped"], prod_templates["shipped"]).changes == ()


# ------------------------------------------------------------------------------------ CloudFormation, from the schemas


def cfn(logical_id: str, kind: str, **properties) -> tuple[str, dict]:
    return logical_id, {"Type": kind, "Properties": properties}


def one_change(before: dict, after: dict, logical_id: str):
    from kvtiers.change.cloudformation import resource_changes

    return next(c for c in resource_changes(before, after) if c.logical_id == logical_id)


def test_the_schemas_are_cfn_lints_bundled_data_not_the_user_cache():
    import cfnlint

    from kvtiers.change.cloudformation import schema_dirs

    bundled = Path(cfnlint.__file__).parent / "data" / "schemas"
    assert schema_dirs() == (bundled / "providers", bundled / "resources")


def test_an_eks_service_cidr_change_replaces_the_named_cluster_and_fails():
    from kvtiers.change.cloudformation import CfnAction

    old = {"Name": "c", "Version": "1.33", "KubernetesNetworkConfig": {"ServiceIpv4Cidr": "10.100.0.0/16"}}
    new = copy.deepcopy(old)
    new["KubernetesNetworkConfig"]["ServiceIpv4Cidr"] = "10.101.0.0/16"
    change = one_change(stack(cfn("C", "AWS::EKS::Cluster", **old)), stack(cfn("C", "AWS::EKS::Cluster", **new)), "C")
    assert change.action is CfnAction.REPLACE and "custom-named" in change.error
    upgraded = {**old, "Version": "1.34"}
    change = one_change(
        stack(cfn("C", "AWS::EKS::Cluster", **old)), stack(cfn("C", "AWS::EKS::Cluster", **upgraded)), "C"
    )
    assert change.action is CfnAction.UPDATE and change.error is None


def test_a_block_that_appears_is_compared_at_its_leaves_not_as_one_value():
    from kvtiers.change.cloudformation import CfnAction, changed_paths

    old = {"Name": "c", "Version": "1.34"}
    new = {**old, "KubernetesNetworkConfig": {"ElasticLoadBalancing": {"Enabled": True}}}
    change = one_change(stack(cfn("C", "AWS::EKS::Cluster", **old)), stack(cfn("C", "AWS::EKS::Cluster", **new)), "C")
    assert change.action is CfnAction.UPDATE and change.error is None
    with_cidr = {**old, "KubernetesNetworkConfig": {"ServiceIpv4Cidr": "10.100.0.0/16"}}
    change = one_change(
        stack(cfn("C", "AWS::EKS::Cluster", **old)), stack(cfn("C", "AWS::EKS::Cluster", **with_cidr)), "C"
    )
    assert change.action is CfnAction.REPLACE
    assert list(changed_paths({"T": [{"K": "a"}]}, {"T": [{"K": "a"}, {"K": "b"}]})) == ["/properties/T/1/K"]


def test_a_hyperpod_instance_count_is_updated_in_place_and_its_subnets_replace_it():
    from kvtiers.change.cloudformation import CfnAction

    old = {"ClusterName": "h", "InstanceGroups": [{"InstanceCount": 2}], "VpcConfig": {"Subnets": ["a"]}}
    more = {**old, "InstanceGroups": [{"InstanceCount": 3}]}
    moved = {**old, "VpcConfig": {"Subnets": ["b"]}}
    before = stack(cfn("H", "AWS::SageMaker::Cluster", **old))
    assert one_change(before, stack(cfn("H", "AWS::SageMaker::Cluster", **more)), "H").action is CfnAction.UPDATE
    replaced = one_change(before, stack(cfn("H", "AWS::SageMaker::Cluster", **moved)), "H")
    assert replaced.action is CfnAction.REPLACE and "ClusterName" in replaced.error


def test_a_service_token_change_fails_and_other_custom_resource_changes_update():
    from kvtiers.change.cloudformation import CfnAction

    kind = "Custom::AWSCDK-EKS-KubernetesResource"
    before = stack(cfn("M", kind, ServiceToken="a", Manifest="[]"))
    assert one_change(before, stack(cfn("M", kind, ServiceToken="b", Manifest="[]")), "M").action is CfnAction.FAIL
    assert one_change(before, stack(cfn("M", kind, ServiceToken="a", Manifest="[1]")), "M").action is CfnAction.UPDATE


def test_a_replacement_cascades_through_ref_into_a_create_only_property_and_a_replaced_bucket_loses_data():
    from kvtiers.change.cloudformation import CfnAction, resource_changes

    key = {"Type": "AWS::KMS::Key", "Properties": {}}
    before = stack(
        cfn("Vpc", "AWS::EC2::VPC", CidrBlock="10.0.0.0/16"),
        cfn("Sub", "AWS::EC2::Subnet", VpcId={"Ref": "Vpc"}, CidrBlock="10.0.0.0/24"),
        cfn("Bucket", "AWS::S3::Bucket", BucketName="b"),
        ("Key", key),
    )
    after = copy.deepcopy(before)
    after["s"]["Resources"]["Vpc"]["Properties"]["CidrBlock"] = "10.1.0.0/16"
    after["s"]["Resources"]["Bucket"]["Properties"]["BucketName"] = "c"
    del after["s"]["Resources"]["Key"]
    changes = {c.logical_id: c for c in resource_changes(before, after)}
    assert changes["Vpc"].action is CfnAction.REPLACE
    assert changes["Sub"].action is CfnAction.REPLACE and "Vpc" in changes["Sub"].because[0]
    assert changes["Bucket"].action is CfnAction.REPLACE and "bucket" in changes["Bucket"].error
    assert changes["Key"].action is CfnAction.DELETE and "KMS key" in changes["Key"].error


def test_a_conditionally_create_only_property_may_replace():
    from kvtiers.change.cloudformation import CfnAction

    before = stack(cfn("Vpc", "AWS::EC2::VPC", CidrBlock="10.0.0.0/16", InstanceTenancy="default"))
    after = stack(cfn("Vpc", "AWS::EC2::VPC", CidrBlock="10.0.0.0/16", InstanceTenancy="dedicated"))
    assert one_change(before, after, "Vpc").action is CfnAction.MAY_REPLACE


# ------------------------------------------------------------------------------------------- immutable Kubernetes fields


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (
            obj("apps/v1", "StatefulSet", "m", volumeClaimTemplates=[{"a": 1}]),
            obj("apps/v1", "StatefulSet", "m", volumeClaimTemplates=[{"a": 2}]),
            "spec.volumeClaimTemplates",
        ),
        (
            obj("apps/v1", "StatefulSet", "m", serviceName="a"),
            obj("apps/v1", "StatefulSet", "m", serviceName="b"),
            "spec.serviceName",
        ),
        (
            obj("apps/v1", "StatefulSet", "m", podManagementPolicy="Parallel"),
            obj("apps/v1", "StatefulSet", "m"),
            "spec.podManagementPolicy",
        ),
        (
            obj("apps/v1", "Deployment", "d", selector={"a": "1"}),
            obj("apps/v1", "Deployment", "d", selector={"a": "2"}),
            "spec.selector",
        ),
        (
            obj("v1", "PersistentVolumeClaim", "c", storageClassName="a"),
            obj("v1", "PersistentVolumeClaim", "c", storageClassName="b"),
            "spec.storageClassName",
        ),
        (
            obj("v1", "PersistentVolumeClaim", "c", resources={"requests": {"storage": "10Gi"}}),
            obj("v1", "PersistentVolumeClaim", "c", resources={"requests": {"storage": "5Gi"}}),
            "spec.resources.requests.storage",
        ),
        (
            obj("v1", "PersistentVolume", "v", None, csi={"volumeHandle": "a"}),
            obj("v1", "PersistentVolume", "v", None, csi={"volumeHandle": "b"}),
            "spec.csi",
        ),
        (
            {**obj("storage.k8s.io/v1", "StorageClass", "s", None), "parameters": {"a": "1"}},
            {**obj("storage.k8s.io/v1", "StorageClass", "s", None), "parameters": {"a": "2"}},
            "parameters",
        ),
        (
            obj("storage.k8s.io/v1", "CSIDriver", "c", None, attachRequired=False),
            obj("storage.k8s.io/v1", "CSIDriver", "c", None, attachRequired=True),
            "spec.attachRequired",
        ),
        (
            obj("v1", "Service", "s", clusterIP="None"),
            obj("v1", "Service", "s", clusterIP="10.0.0.1"),
            "spec.clusterIP",
        ),
        (
            obj("v1", "Service", "s", type="LoadBalancer", loadBalancerClass="a"),
            obj("v1", "Service", "s", type="LoadBalancer", loadBalancerClass="b"),
            "spec.loadBalancerClass",
        ),
        (
            obj("v1", "Service", "s", type="LoadBalancer", healthCheckNodePort=30001),
            obj("v1", "Service", "s", type="LoadBalancer", healthCheckNodePort=30002),
            "spec.healthCheckNodePort",
        ),
        (
            obj("v1", "Service", "s", ipFamilies=["IPv4"]),
            obj("v1", "Service", "s", ipFamilies=["IPv6", "IPv4"]),
            "spec.ipFamilies.0",
        ),
        (
            {**obj("rbac.authorization.k8s.io/v1", "RoleBinding", "b"), "roleRef": {"kind": "Role", "name": "a"}},
            {**obj("rbac.authorization.k8s.io/v1", "RoleBinding", "b"), "roleRef": {"kind": "Role", "name": "b"}},
            "roleRef",
        ),
        (
            {**obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "b", None), "roleRef": {"name": "a"}},
            {**obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "b", None), "roleRef": {"name": "b"}},
            "roleRef",
        ),
    ],
)
def test_an_immutable_field_changed_in_place_is_reported(old, new, field):
    before = stack(manifest("App", [old]))
    after = stack(manifest("App", [new]))
    assert [c.field for c in deploy(before, after).immutable] == [field]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            obj("apps/v1", "StatefulSet", "m", replicas=1, template={"a": 1}),
            obj("apps/v1", "StatefulSet", "m", replicas=3, template={"a": 2}),
        ),
        (
            obj("apps/v1", "StatefulSet", "m", revisionHistoryLimit=10),
            obj("apps/v1", "StatefulSet", "m", revisionHistoryLimit=2),
        ),
        (
            obj("v1", "PersistentVolumeClaim", "c", resources={"requests": {"storage": "5Gi"}}),
            obj("v1", "PersistentVolumeClaim", "c", resources={"requests": {"storage": "10Gi"}}),
        ),
        (
            obj("storage.k8s.io/v1", "CSIDriver", "c", None, podInfoOnMount=False),
            obj("storage.k8s.io/v1", "CSIDriver", "c", None, podInfoOnMount=True),
        ),
        (
            obj("v1", "Service", "s", clusterIP="None", ports=[1]),
            obj("v1", "Service", "s", clusterIP="None", ports=[2]),
        ),
        (
            obj("policy/v1", "PodDisruptionBudget", "p", maxUnavailable=1),
            obj("policy/v1", "PodDisruptionBudget", "p", maxUnavailable=2),
        ),
        (
            obj("v1", "Service", "s", ipFamilies=["IPv4"]),
            obj("v1", "Service", "s", ipFamilies=["IPv4", "IPv6"]),
        ),
        (
            {**obj("rbac.authorization.k8s.io/v1", "RoleBinding", "b"), "roleRef": {"name": "a"}, "subjects": [1]},
            {**obj("rbac.authorization.k8s.io/v1", "RoleBinding", "b"), "roleRef": {"name": "a"}, "subjects": [2]},
        ),
    ],
)
def test_a_mutable_change_is_not_reported(old, new):
    assert deploy(stack(manifest("App", [old])), stack(manifest("App", [new]))).immutable == ()


# ------------------------------------------------------------------------------------------------------ cleanup deletes


def test_a_deleted_custom_resource_may_remain_and_deletes_run_dependents_first():
    iec = obj("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig", "e")
    policy_id, policy = manifest("Policy", [obj("kyverno.io/v1", "Policy", "p")])
    endpoint_id, endpoint = manifest("Endpoint", [iec])
    endpoint["DependsOn"] = ["Policy"]
    keep = manifest("Keep", [obj("v1", "Service", "keep")])
    outcome = deploy(stack(keep, (policy_id, policy), (endpoint_id, endpoint)), stack(keep))
    assert [(c.logical_id, c.action) for c in outcome.changes] == [
        ("Endpoint", Action.DELETE),
        ("Policy", Action.DELETE),
    ]
    # The operator may finalize its endpoint; Kyverno finalizes no Policy (kvtiers.change.finalizers).
    assert {r.kind for r in outcome.may_remain} == {"InferenceEndpointConfig"}
    plain = deploy(stack(keep, manifest("Web", [obj("apps/v1", "Deployment", "w")])), stack(keep))
    assert plain.may_remain == ()


# ------------------------------------------------------------------------------------------------------- rollout pace


def test_rollout_pace_follows_the_strategy_and_kubernetes_defaults():
    from kvtiers.change.rollout import workloads

    def engine(name, strategy=None, replicas=4, image="a"):
        template = {"spec": {"containers": [{"image": image, "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
        spec = {"replicas": replicas, "template": template, **({"strategy": strategy} if strategy else {})}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "s"},
            "spec": spec,
        }

    before = {ObjectRef.of(o): o for o in (engine("default"), engine("recreate", {"type": "Recreate"}))}
    after = {
        ObjectRef.of(o): o for o in (engine("default", image="b"), engine("recreate", {"type": "Recreate"}, image="b"))
    }
    rolled = {w.ref.name: w for w in workloads(before, after)}
    # 25 % of 4: one pod down (rounded down) and one extra (rounded up) at a time.
    assert (rolled["default"].at_once, rolled["default"].surge, rolled["default"].gpus_idle) == (1, 1, 2)
    assert (rolled["recreate"].at_once, rolled["recreate"].gpus_idle) == (4, 8)


def test_an_immutable_change_error_says_what_to_do_instead():
    from kvtiers.change.report import environment_change

    old = obj("apps/v1", "StatefulSet", "curvine-master", "curvine", volumeClaimTemplates=[{"size": "50Gi"}])
    new = obj("apps/v1", "StatefulSet", "curvine-master", "curvine", volumeClaimTemplates=[{"size": "60Gi"}])
    change = environment_change("dev", stack(manifest("M", [old])), stack(manifest("M", [new])), None, None)
    (error,) = change.errors
    assert "spec.volumeClaimTemplates is immutable" in error
    assert "deploy a new environment" in error and 'docs/runbooks.md "Upgrade"' in error
