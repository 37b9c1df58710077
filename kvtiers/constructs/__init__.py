"""Reusable CDK constructs. Each takes keyword-only arguments (value objects are frozen dataclasses), checks them
when it is built, and reads neither files nor the environment.

- :class:`HyperPodNetwork` - VPC (new or imported by IDs), HyperPod subnet by AZ ID, S3 endpoint, EFA/FSx group.
- :class:`EksCluster` - aws_eks_v2 cluster for HyperPod: pinned core add-ons, logging, KMS, kubectl provider.
- :class:`NodeTraffic` - the security-group rules between system nodes and HyperPod nodes.
- :class:`HyperPodDependencies` - the HyperPod dependency Helm chart, deployed from a vendored folder.
- :class:`HyperPodCluster` - ``AWS::SageMaker::Cluster`` with its instance groups, tiered storage, role and
  lifecycle bucket.
- :class:`CurvineJournalVolumes` - KMS-encrypted gp3 volumes for the Curvine masters' metadata and journal.
- :class:`ModelReadAccess` - a Pod Identity role that reads one S3 prefix of model weights.
- :class:`RouterAccess` - a router's own Pod Identity role: no weights, a kvaware router's tokenizer files only.
- :class:`CurvineL2` - the Curvine L2 (masters, workers, CSI, claim, janitor) with its NetworkPolicies;
  ``CurvineL2.from_curvine_l2_attributes`` imports one another stack or team deployed (:class:`ICurvineL2`).
- :class:`ServingEndpoint` - a self-managed vLLM + LMCache endpoint with its router, access, key and policies.
- :class:`OperatorServingEndpoint` - an endpoint the HyperPod Inference Operator runs, with its L2 policy.
- :class:`SecretsStoreCsi` - the ASCP add-on and the serving secrets' KMS key
  (``SecretsStoreCsi.from_secrets_store_attributes`` imports them).
- ``HyperPodCluster.from_hyperpod_cluster_attributes`` imports a HyperPod cluster (:class:`IHyperPodCluster`).

``kvtiers.constructs.hyperpod_inference.InferenceOperator`` and ``kvtiers.constructs.observability.Observability``
are imported from their modules: they load more of aws-cdk-lib.
"""

from kvtiers.constructs.curvine import CurvineL2, ImportedCurvineL2
from kvtiers.constructs.eks_cluster import (
    ClusterLike,
    CoreAddonVersions,
    EksCluster,
    SystemNodegroup,
    kubectl_layer,
    pod_identity_role,
)
from kvtiers.constructs.endpoint_secrets import ImportedSecretsStore, SecretsStoreCsi
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, ImportedHyperPodCluster, InstanceGroup, Taint
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.interfaces import ICurvineL2, IHyperPodCluster
from kvtiers.constructs.journal_volumes import CurvineJournalVolumes, MasterVolumes
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.constructs.network import ExistingVpcAttributes, HyperPodNetwork, NewVpcOptions
from kvtiers.constructs.node_traffic import NodeTraffic, PortRule
from kvtiers.constructs.operator_serving import OperatorServingEndpoint
from kvtiers.constructs.router_access import RouterAccess
from kvtiers.constructs.serving import ServingEndpoint

__all__ = [
    "ClusterLike",
    "CoreAddonVersions",
    "CurvineJournalVolumes",
    "CurvineL2",
    "EksCluster",
    "ExistingVpcAttributes",
    "HyperPodCluster",
    "HyperPodDependencies",
    "HyperPodNetwork",
    "ICurvineL2",
    "IHyperPodCluster",
    "ImportedCurvineL2",
    "ImportedHyperPodCluster",
    "ImportedSecretsStore",
    "InstanceGroup",
    "MasterVolumes",
    "ModelReadAccess",
    "NewVpcOptions",
    "NodeTraffic",
    "OperatorServingEndpoint",
    "PortRule",
    "RouterAccess",
    "SecretsStoreCsi",
    "ServingEndpoint",
    "SystemNodegroup",
    "Taint",
    "kubectl_layer",
    "pod_identity_role",
]
