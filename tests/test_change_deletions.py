"""The report shows every deletion (kvtiers.change.deletions): each pruned or deleted Kubernetes object and each
deleted CloudFormation resource; those that take data or a client-facing name with them are errors unless the
environment file names them in ``intended_deletions``, and an acknowledgment that matches nothing is an error too.
Which deletions can wait for a controller follows the finalizers objects carry or controllers are known to add
(kvtiers.change.finalizers), not the API group.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from kvtiers.change import deploy
from kvtiers.change.deletions import IntendedDeletion, read_intended_deletions, write_intended_deletions
from kvtiers.change.finalizers import FINALIZED, FINALIZER_FREE
from kvtiers.change.report import environment_change, markdown
from kvtiers.cli.main import app
from kvtiers.config import ConfigError, load_environment
from tests.conftest import CONFIG_DIR, ROOT
from tests.test_change_model import manifest, obj, stack

NLB = "Service serving/chat-router-nlb"
CLAIM = "PersistentVolumeClaim serving/curvine-l2"
SECRET = "AWS::SecretsManager::Secret s/ChatApiKey"


def router(*, nlb: bool) -> list[dict]:
    objects = [obj("v1", "Service", "chat-router", type="ClusterIP")]
    if nlb:
        objects.append(obj("v1", "Service", "chat-router-nlb", type="LoadBalancer", externalTrafficPolicy="Local"))
    return objects


def storage(claim: str) -> list[dict]:
    storage_class = obj("storage.k8s.io/v1", "StorageClass", "curvine-l2", namespace=None)
    storage_class.pop("spec")
    storage_class.update(provisioner="curvine", reclaimPolicy="Retain")
    return [storage_class, obj("v1", "PersistentVolumeClaim", claim, storageClassName="curvine-l2")]


def change(before: dict, after: dict, *intended: IntendedDeletion):
    return environment_change("env", before, after, None, None, intended=intended)


def test_a_pruned_load_balancer_service_is_listed_and_an_error_naming_how_to_acknowledge_it():
    found = change(stack(manifest("Chat", router(nlb=True))), stack(manifest("Chat", router(nlb=False))))
    (deleted,) = found.deletions.deleted
    assert (deleted.target, deleted.how) == (NLB, "pruned by s Chat")
    assert deleted.loses and "DNS name" in deleted.loses
    (error,) = found.errors
    assert error.startswith(f"deleted: {NLB} (pruned by s Chat) loses its load balancer and DNS name")
    assert "intended_deletions" in error
    text = markdown([found])
    assert f"| {NLB} | pruned by s Chat |" in text and "**not acknowledged**" in text


def test_an_acknowledged_deletion_is_no_error_and_the_report_shows_the_reason():
    reason = "clients moved to the ClusterIP Service"
    found = change(
        stack(manifest("Chat", router(nlb=True))),
        stack(manifest("Chat", router(nlb=False))),
        IntendedDeletion(NLB, reason),
    )
    assert found.errors == ()
    assert f"| {NLB} | pruned by s Chat |" in markdown([found]) and reason in markdown([found])


def test_an_acknowledgment_of_another_object_does_not_hide_the_loss_and_is_itself_stale():
    found = change(
        stack(manifest("Chat", router(nlb=True))),
        stack(manifest("Chat", router(nlb=False))),
        IntendedDeletion("Service serving/other-router-nlb", "a typo"),
    )
    assert [e.split(" ")[0] for e in found.errors] == ["deleted:", "stale"]
    assert "intended_deletions names Service serving/other-router-nlb" in found.errors[1]


def test_a_stale_acknowledgment_is_an_error_even_when_nothing_is_deleted():
    same = stack(manifest("Chat", router(nlb=True)))
    (error,) = change(same, same, IntendedDeletion(NLB, "done last week")).errors
    assert error.startswith(f"stale acknowledgment: intended_deletions names {NLB}")


def test_an_acknowledgment_the_base_carries_too_that_matches_nothing_is_a_warning_not_an_error():
    """The pull request after the one that merged the entry: the base already has it and nothing is deleted."""
    same = stack(manifest("Chat", router(nlb=False)))
    entry = IntendedDeletion(NLB, "clients moved to the ClusterIP Service")
    found = environment_change("env", same, same, None, None, intended=(entry,), intended_before=(entry,))
    assert found.errors == ()
    (warning,) = found.warnings
    assert warning.startswith(f"acknowledgment left over: intended_deletions names {NLB}")
    assert "acknowledged in an earlier change" in warning and "remove it" in warning
    assert "is deployed" not in warning


def test_a_renamed_claim_deletes_the_old_claim_and_says_what_its_storage_class_keeps():
    found = change(stack(manifest("Storage", storage("curvine-l2"))), stack(manifest("Storage", storage("l2-next"))))
    (deleted,) = found.deletions.deleted
    assert deleted.target == CLAIM
    assert deleted.loses and "StorageClass curvine-l2's reclaimPolicy Retain" in deleted.loses
    assert len(found.errors) == 1 and found.errors[0].startswith(f"deleted: {CLAIM}")
    intended = IntendedDeletion(CLAIM, "the L2 starts cold on purpose")
    assert (
        change(
            stack(manifest("Storage", storage("curvine-l2"))), stack(manifest("Storage", storage("l2-next"))), intended
        ).errors
        == ()
    )


def test_a_pruned_config_map_is_listed_but_loses_nothing():
    before = stack(manifest("App", [obj("v1", "ConfigMap", "a"), obj("v1", "ConfigMap", "b")]))
    found = change(before, stack(manifest("App", [obj("v1", "ConfigMap", "a")])))
    assert [(d.target, d.loses) for d in found.deletions.deleted] == [("ConfigMap serving/b", None)]
    assert found.errors == ()
    assert "| ConfigMap serving/b | pruned by s App | - | - |" in markdown([found])


def test_a_deleted_operator_endpoint_loses_its_sagemaker_endpoint_name():
    config = obj("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig", "chat-9aa6d08a")
    config["spec"]["endpointName"] = "chat-9aa6d08a"
    keep = manifest("Keep", [obj("v1", "ConfigMap", "keep")])
    found = change(stack(keep, manifest("Chat9aa6", [config])), stack(keep))
    (error,) = found.errors
    assert "InferenceEndpointConfig.inference.sagemaker.aws.amazon.com serving/chat-9aa6d08a" in error
    assert "SageMaker endpoint chat-9aa6d08a" in error


def test_a_secret_a_volume_and_everything_in_a_deleted_namespace_are_listed():
    volume = obj("v1", "PersistentVolume", "journal", namespace=None, persistentVolumeReclaimPolicy="Retain")
    before = stack(
        manifest("Ns", [obj("v1", "Namespace", "team", namespace=None)]),
        manifest("Data", [obj("v1", "Secret", "token", namespace="team"), volume]),
    )
    found = change(before, stack(manifest("Other", [obj("v1", "ConfigMap", "c", namespace="other")])))
    losses = {d.target: d.loses for d in found.deletions.deleted}
    assert losses["Secret team/token"] and "keys" in losses["Secret team/token"]
    assert losses["PersistentVolume journal"] and "reclaimPolicy Retain" in losses["PersistentVolume journal"]
    assert losses["Namespace team"] is None
    assert {e.split(" ")[1] for e in found.errors} == {"Secret", "PersistentVolume"}


def _secret_templates(*, with_secret: bool, policy: str = "Delete") -> dict:
    resources: dict = {"Keep": {"Type": "AWS::SNS::Topic", "Properties": {}}}
    if with_secret:
        resources["ChatApiKey"] = {"Type": "AWS::SecretsManager::Secret", "Properties": {}, "DeletionPolicy": policy}
        resources["Journal"] = {"Type": "AWS::EC2::Volume", "Properties": {}, "DeletionPolicy": policy}
    return {"s": {"Resources": resources}}


def test_a_deleted_secrets_manager_secret_and_volume_are_errors_once_each_unless_acknowledged():
    before, after = _secret_templates(with_secret=True), _secret_templates(with_secret=False)
    errors = change(before, after).errors
    assert len(errors) == 2
    assert any(e.startswith(f"deleted: {SECRET} (deleted by CloudFormation) loses the secret's value") for e in errors)
    assert any(e.startswith("deleted: AWS::EC2::Volume s/Journal") and "EBS volume" in e for e in errors)
    both = (IntendedDeletion(SECRET, "endpoint retired"), IntendedDeletion("AWS::EC2::Volume s/Journal", "same"))
    assert change(before, after, *both).errors == ()


def test_a_retained_resource_is_listed_as_kept_and_loses_nothing():
    found = change(_secret_templates(with_secret=True, policy="Retain"), _secret_templates(with_secret=False))
    assert found.errors == ()
    assert {d.how for d in found.deletions.deleted} == {"removed from the stack, kept (DeletionPolicy Retain)"}


def test_a_volume_deleted_with_a_snapshot_still_loses_the_volume_and_says_the_snapshot_is_kept():
    before = {"s": {"Resources": {"Journal": {"Type": "AWS::EC2::Volume", "DeletionPolicy": "Snapshot"}}}}
    found = change(before, {"s": {"Resources": {}}})
    (error,) = found.errors
    assert error.startswith("deleted: AWS::EC2::Volume s/Journal (deleted by CloudFormation, a snapshot kept) loses")


def test_kvtiers_diff_reads_the_acknowledgments_from_the_assembly_it_deploys(tmp_path):
    def assembly(name: str, objects: list[dict], intended: list[IntendedDeletion] | None = None):
        folder = tmp_path / name
        folder.mkdir()
        _, resource = manifest("Chat", objects)
        (folder / "env-workloads.template.json").write_text(json.dumps({"Resources": {"Chat": resource}}))
        if intended is not None:
            write_intended_deletions(folder, intended)
        return folder

    before = assembly("before", router(nlb=True), [IntendedDeletion(NLB, "in the base: not this change's")])
    refused = CliRunner().invoke(
        app, ["diff", "--before", str(before), "--after", str(assembly("a", router(nlb=False)))]
    )
    assert refused.exit_code == 1 and f"deleted: {NLB}" in refused.output
    acknowledged = assembly("b", router(nlb=False), [IntendedDeletion(NLB, "moved to the ClusterIP Service")])
    assert read_intended_deletions(acknowledged) == (IntendedDeletion(NLB, "moved to the ClusterIP Service"),)
    accepted = CliRunner().invoke(app, ["diff", "--before", str(before), "--after", str(acknowledged)])
    assert accepted.exit_code == 0, accepted.output
    assert "moved to the ClusterIP Service" in accepted.output


# -------------------------------------------------------------------------------------------------- environment file


def _with(tmp_path, entries: list[dict]):
    raw = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    raw["intended_deletions"] = entries
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_environment(path)


def test_the_environment_file_names_each_intended_deletion_with_a_reason(tmp_path):
    env = _with(tmp_path, [{"target": NLB, "reason": "clients moved"}, {"target": SECRET, "reason": "retired"}])
    assert [(d.target, d.reason) for d in env.intended_deletions] == [(NLB, "clients moved"), (SECRET, "retired")]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"target": NLB}], "reason"),
        ([{"target": "Service serving/*", "reason": "no wildcards"}], "target"),
        ([{"target": NLB, "reason": "a"}, {"target": NLB, "reason": "b"}], "more than once"),
    ],
)
def test_an_acknowledgment_without_a_reason_a_name_or_twice_is_refused(tmp_path, entries, message):
    with pytest.raises(ConfigError, match=message):
        _with(tmp_path, entries)


# ------------------------------------------------------------------------------------------------------- finalizers


def _cleanup(objects: list[dict]):
    keep = manifest("Keep", [obj("v1", "ConfigMap", "keep")])
    return deploy(stack(keep, manifest("Gone", objects)), stack(keep))


def test_a_deleted_secret_provider_class_or_kyverno_policy_goes_at_once():
    outcome = _cleanup(
        [
            obj("secrets-store.csi.x-k8s.io/v1", "SecretProviderClass", "chat-secrets", provider="aws"),
            obj("kyverno.io/v1", "Policy", "chat-curvine-l2"),
        ]
    )
    assert len(outcome.change("Gone").deleted) == 2
    assert outcome.may_remain == ()


def test_what_a_controller_finalizes_may_remain():
    declared = obj("example.com/v1", "Widget", "w")
    declared["metadata"]["finalizers"] = ["example.com/cleanup"]
    outcome = _cleanup(
        [
            obj("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig", "chat-9aa6d08a"),
            obj("v1", "Service", "chat-router-nlb", type="LoadBalancer"),
            obj("v1", "Service", "chat-router", type="ClusterIP"),
            declared,
        ]
    )
    assert {str(r) for r in outcome.may_remain} == {
        "InferenceEndpointConfig.inference.sagemaker.aws.amazon.com serving/chat-9aa6d08a",
        "Service serving/chat-router-nlb",
        "Widget.example.com serving/w",
    }


def test_every_custom_kind_the_shipped_environments_render_has_its_finalizers_looked_up():
    """A new custom kind needs a row (with its source) in FINALIZED or FINALIZER_FREE."""
    known = set(FINALIZED) | set(FINALIZER_FREE)
    for env in ("dev", "prod"):
        golden = json.loads((ROOT / "tests" / "golden" / f"{env}.json").read_text())
        for path, declared in golden["kubernetes"].items():
            group = str(declared["apiVersion"]).rpartition("/")[0]
            if "." in group and not group.endswith(".k8s.io"):
                assert (group, declared["kind"]) in known, f"{env}: {path}: no finalizer row for {declared['kind']}"


def test_an_acknowledgment_carried_over_from_the_base_does_not_hide_a_new_loss_of_the_same_object():
    """The base still carries an earlier change's entry and deploys the object again; this change deletes it."""
    entry = IntendedDeletion(NLB, "clients moved to the ClusterIP Service")
    found = environment_change(
        "env",
        stack(manifest("Chat", router(nlb=True))),
        stack(manifest("Chat", router(nlb=False))),
        None,
        None,
        intended=(entry,),
        intended_before=(entry,),
    )
    (error,) = found.errors
    assert error.startswith(f"deleted: {NLB} (pruned by s Chat) loses its load balancer and DNS name")
    assert "acknowledged only by an entry carried over from an earlier change" in error
    assert "acknowledge it again in this change" in error
    assert found.warnings == ()
    assert "**not acknowledged**" in markdown([found])


def test_an_entry_whose_reason_this_change_rewrites_acknowledges_the_deletion_again():
    old = IntendedDeletion(NLB, "clients moved to the ClusterIP Service")
    new = IntendedDeletion(NLB, "deleted again: the second NLB was a mistake (OPS-200)")
    found = environment_change(
        "env",
        stack(manifest("Chat", router(nlb=True))),
        stack(manifest("Chat", router(nlb=False))),
        None,
        None,
        intended=(new,),
        intended_before=(old,),
    )
    assert found.errors == () and found.warnings == ()
    assert new.reason in markdown([found])
