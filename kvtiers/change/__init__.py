"""A change model: what deploying one synthesized cloud assembly after another does to the Kubernetes objects that
CDK's manifest resources put on the cluster (CloudFormation's create, update and cleanup delete of each resource,
the kubectl handler's apply, prune and delete, kubectl's default prune list).

Input: two assemblies' templates (:func:`load_templates` reads a ``cdk.out``). Output: a :class:`DeployOutcome`
with each resource's change, the objects on the cluster afterwards, and the orphans and lost objects.
"""

from kvtiers.change.deploy import Action, DeployOutcome, ResourceChange, deploy, first_deploy
from kvtiers.change.kubectl import CLUSTER_PRUNE_KINDS, NAMESPACED_PRUNE_KINDS, Cluster, LiveObject, prunable
from kvtiers.change.manifests import ManifestResource, ObjectRef, load_templates, manifest_resources

__all__ = [
    "CLUSTER_PRUNE_KINDS",
    "NAMESPACED_PRUNE_KINDS",
    "Action",
    "Cluster",
    "DeployOutcome",
    "LiveObject",
    "ManifestResource",
    "ObjectRef",
    "ResourceChange",
    "deploy",
    "first_deploy",
    "load_templates",
    "manifest_resources",
    "prunable",
]
