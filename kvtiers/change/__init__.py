"""A change model: what deploying one synthesized cloud assembly after another does.

- :mod:`kvtiers.change.cloudformation`: each CloudFormation resource created, updated, replaced or deleted (from
  cfn-lint's bundled provider schemas);
- :mod:`kvtiers.change.deploy`: the Kubernetes objects CDK's manifest resources leave on the cluster (the kubectl
  handler's apply, prune and delete, kubectl's default prune list), orphans, lost objects, objects that may remain,
  and immutable fields changed in place (:mod:`kvtiers.change.immutable`);
- :mod:`kvtiers.change.stacks`: what the order of the stacks' deploys does (stale cross-stack reads, deletions a later
  stack still uses);
- :mod:`kvtiers.change.admission`: claim growth the API server's resize admission refuses;
- :mod:`kvtiers.change.rollout`: restarts, their pace and idle GPUs per workload, outages and routing state lost,
  cache effects per endpoint (a new or renamed endpoint's empty L2, abandoned L2 directories);
- :mod:`kvtiers.change.operator`: an operator endpoint's config replaced (outage, new SageMaker endpoint name);
- :mod:`kvtiers.change.report`: all of it for one environment, its errors, and the Markdown of ``kvtiers diff``.

Input: two assemblies (``cdk.out``): their templates (:func:`load_templates`) and the synth's endpoint record
(:mod:`kvtiers.change.record`).
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
