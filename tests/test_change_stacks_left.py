"""A stack that leaves the app stays deployed: ``cdk deploy`` deploys only the stacks of the cloud assembly it selects
and never deletes one (aws/aws-cdk-cli ``packages/aws-cdk/lib/cli/cdk-toolkit.ts`` ``deploy`` ->
``selectStacksForDeploy``, ``destroy``; README "cdk destroy": "Deletes a stack"). Its resources and the Kubernetes
objects of its manifests stay, and a custom name it holds makes a new resource of that name fail to create.
"""

from __future__ import annotations

from kvtiers.change.cloudformation import CfnAction, resource_changes
from kvtiers.change.deploy import deploy
from kvtiers.change.report import environment_change, markdown
from tests.test_change_model import manifest, obj
from tests.test_change_stacks import _hyperpod

OLD, NEW = "env-platform", "env-platform-v2"


def _platform(objects: list[dict]) -> dict:
    template = _hyperpod("subnet-1")
    template["Resources"].update(
        [
            manifest("Engines", objects),
            ("Metrics", {"Type": "AWS::APS::Workspace", "Properties": {"Alias": "env"}}),
        ]
    )
    return template


def _engine(name: str) -> dict:
    return obj("apps/v1", "Deployment", name, replicas=1)


def test_a_stack_that_leaves_the_app_is_left_deployed_not_deleted():
    before = {OLD: _platform([_engine("chat")])}
    after = {NEW: {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}}}}}
    changes = resource_changes(before, after)
    assert not [c for c in changes if c.action is CfnAction.DELETE]
    (left,) = [c for c in changes if c.stack == OLD]
    assert left.action is CfnAction.LEFT_DEPLOYED and left.error is None
    assert f"cdk destroy {OLD}" in left.because[0] and "does not delete stacks" in left.because[0]
    found = environment_change("env", before, after, None, None)
    assert found.errors == ()
    assert found.deletions.deleted == ()
    assert any(w.startswith(f"{OLD} is left deployed") for w in found.warnings)
    assert f"| {OLD} |" in markdown([found])


def test_the_kubernetes_objects_of_a_stack_left_deployed_stay_and_are_not_orphans_or_deleted():
    before = {OLD: _platform([_engine("chat")])}
    after = {NEW: {"Resources": dict([manifest("Web", [_engine("web")])])}}
    outcome = deploy(before, after)
    assert not [c for c in outcome.changes if c.deleted]
    chat = next(r for r in outcome.cluster.objects if r.name == "chat")
    assert outcome.left_deployed == (chat,)
    assert outcome.orphans == ()
    assert dict(outcome.stages)[OLD] >= {chat}


def test_a_new_stack_taking_a_custom_name_the_stack_left_deployed_holds_fails_to_create():
    before = {OLD: _platform([_engine("chat")])}
    after = {NEW: _platform([_engine("chat")])}
    changes = {(c.stack, c.logical_id): c for c in resource_changes(before, after)}
    cluster = changes[(NEW, "HyperPodCluster")]
    assert cluster.action is CfnAction.FAIL
    assert cluster.error and "ClusterName" in cluster.error and f"{OLD}/HyperPodCluster" in cluster.error
    assert "left deployed" in cluster.error
    assert changes[(NEW, "Metrics")].action is CfnAction.CREATE  # Alias is no name CloudFormation enforces
    errors = environment_change("env", before, after, None, None).errors
    assert [e for e in errors if e.startswith(f"{NEW} HyperPodCluster")]


def test_a_new_stack_with_another_cluster_name_creates_it():
    renamed = _platform([_engine("chat")])
    renamed["Resources"]["HyperPodCluster"]["Properties"]["ClusterName"] = "env-v2"
    changes = {(c.stack, c.logical_id): c for c in resource_changes({OLD: _platform([])}, {NEW: renamed})}
    assert changes[(NEW, "HyperPodCluster")].action is CfnAction.CREATE


def test_an_object_the_new_stack_declares_too_is_kept_and_cdk_destroy_of_the_old_stack_is_said_to_delete_it():
    before = {OLD: _platform([_engine("chat")])}
    after = {NEW: {"Resources": dict([manifest("Engines", [_engine("chat")])])}}
    outcome = deploy(before, after)
    chat = next(r for r in outcome.cluster.objects if r.name == "chat")
    assert (outcome.orphans, outcome.lost, outcome.destroy_deletes) == ((), (), ((OLD, chat),))
    warnings = environment_change("env", before, after, None, None).warnings
    assert any(w.startswith(f"cdk destroy {OLD} (left deployed) deletes {chat}") for w in warnings)
