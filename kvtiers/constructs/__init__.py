"""Reusable CDK constructs. Each takes typed props and reads neither files nor the environment.

- :class:`HyperPodNetwork` - VPC (new or imported by IDs), HyperPod subnet by AZ ID, S3 endpoint, EFA/FSx group.
- :class:`EksCluster` - aws_eks_v2 cluster for HyperPod: pinned core add-ons, logging, KMS, kubectl provider.
- :class:`HyperPodDependencies` - the HyperPod dependency Helm chart, deployed from a vendored folder.
- :class:`HyperPodCluster` - ``AWS::SageMaker::Cluster`` with G6e groups, tiered storage, role and lifecycle bucket.
- :class:`CurvineJournalVolumes` - KMS-encrypted gp3 volumes for the Curvine masters' metadata and journal.
"""

from kvtiers.constructs.eks_cluster import (
    CoreAddonVersions,
    EksCluster,
    EksClusterProps,
    SystemNodegroupProps,
    kubectl_layer,
    pod_identity_role,
)
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, HyperPodClusterProps, InstanceGroupProps, TaintProps
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies, HyperPodDependenciesProps
from kvtiers.constructs.journal_volumes import CurvineJournalVolumes, JournalVolumesProps, MasterVolumes
from kvtiers.constructs.network import ExistingVpcProps, HyperPodNetwork, NewVpcProps

__all__ = [
    "CoreAddonVersions",
    "CurvineJournalVolumes",
    "EksCluster",
    "EksClusterProps",
    "ExistingVpcProps",
    "HyperPodCluster",
    "HyperPodClusterProps",
    "HyperPodDependencies",
    "HyperPodDependenciesProps",
    "HyperPodNetwork",
    "InstanceGroupProps",
    "JournalVolumesProps",
    "MasterVolumes",
    "NewVpcProps",
    "SystemNodegroupProps",
    "TaintProps",
    "kubectl_layer",
    "pod_identity_role",
]
