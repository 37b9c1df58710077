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

``kvtiers.constructs.hyperpod_inference.InferenceOperator`` and ``kvtiers.constructs.observability.Observability``
are imported from their modules: they load more of aws-cdk-lib.
"""

from kvtiers.constructs.eks_cluster import (
    ClusterLike,
    CoreAddonVersions,
    EksCluster,
    SystemNodegroup,
    kubectl_layer,
    pod_identity_role,
)
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, InstanceGroup, Taint
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.journal_volumes import CurvineJournalVolumes, MasterVolumes
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.constructs.network import ExistingVpcAttributes, HyperPodNetwork, NewVpcOptions
from kvtiers.constructs.node_traffic import NodeTraffic, PortRule

__all__ = [
    "ClusterLike",
    "CoreAddonVersions",
    "CurvineJournalVolumes",
    "EksCluster",
    "ExistingVpcAttributes",
    "HyperPodCluster",
    "HyperPodDependencies",
    "HyperPodNetwork",
    "InstanceGroup",
    "MasterVolumes",
    "ModelReadAccess",
    "NewVpcOptions",
    "NodeTraffic",
    "PortRule",
    "SystemNodegroup",
    "Taint",
    "kubectl_layer",
    "pod_identity_role",
]
