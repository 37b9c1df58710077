"""EBS volumes for the Curvine masters' metadata and Raft journal, and the EBS CSI driver that attaches them.

The volumes are created by CDK (not by a dynamic StorageClass) so that they outlive HyperPod node replacement and
Kubernetes object churn: a replaced master pod re-attaches the same volume through a static PersistentVolume.
On HyperPod nodes the EBS CSI driver attaches volumes through SageMaker (``AttachClusterNodeVolume``), not EC2,
so its role needs those two actions in addition to the managed EBS CSI policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from kvtiers.aws_limits import gp3_problem

EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_CSI_MANAGED_POLICY = "service-role/AmazonEBSCSIDriverPolicy"


@dataclass(frozen=True)
class MasterVolumes:
    meta: ec2.Volume
    journal: ec2.Volume


@dataclass(frozen=True)
class JournalVolumesProps:
    availability_zone: str
    """AZ name of the HyperPod subnet (a volume attaches only to nodes in its own AZ)."""
    masters: int
    meta_size_gib: int = 20
    """Default: 20 GiB of RocksDB metadata, ample for millions of LMCache chunk files."""
    journal_size_gib: int = 50
    """Default: 50 GiB of Raft log between snapshots."""
    iops: int = 3000
    """Default: the gp3 baseline (no extra charge)."""
    throughput_mibps: int = 125
    """Default: the gp3 baseline."""
    snapshot_on_delete: bool = True
    """Default: snapshot on stack deletion, so the L2 namespace metadata can be restored."""


class CurvineJournalVolumes(Construct):
    """``volumes[i]`` holds master ``i``'s meta and journal volumes; ``key`` encrypts them."""

    def __init__(self, scope: Construct, id: str, *, props: JournalVolumesProps) -> None:
        super().__init__(scope, id)
        if props.masters not in (1, 3, 5):
            raise ValueError(f"JournalVolumesProps.masters must be 1, 3 or 5, got {props.masters}")
        for field_name, size in (("meta_size_gib", props.meta_size_gib), ("journal_size_gib", props.journal_size_gib)):
            problem = gp3_problem(size_gib=size, iops=props.iops, throughput_mibps=props.throughput_mibps)
            if problem:
                raise ValueError(f"CurvineJournalVolumes: JournalVolumesProps.{field_name}: {problem}")
        self.availability_zone = props.availability_zone
        self.key = kms.Key(self, "Key", enable_key_rotation=True, description="Curvine master metadata and journal")
        policy = cdk.RemovalPolicy.SNAPSHOT if props.snapshot_on_delete else cdk.RemovalPolicy.DESTROY
        self.volumes: list[MasterVolumes] = []
        for i in range(props.masters):
            pair = MasterVolumes(
                meta=self._volume(f"Master{i}Meta", props.meta_size_gib, props, policy),
                journal=self._volume(f"Master{i}Journal", props.journal_size_gib, props, policy),
            )
            self.volumes.append(pair)

    def _volume(self, id: str, size: int, props: JournalVolumesProps, policy: cdk.RemovalPolicy) -> ec2.Volume:
        volume = ec2.Volume(
            self,
            id,
            availability_zone=props.availability_zone,
            size=cdk.Size.gibibytes(size),
            volume_type=ec2.EbsDeviceVolumeType.GP3,
            iops=props.iops,
            throughput=props.throughput_mibps,
            encrypted=True,
            encryption_key=self.key,
            removal_policy=policy,
        )
        cdk.Tags.of(volume).add("kvtiers.io/volume", id)
        return volume

    def grant_attach(self, role: iam.IRole, *, hyperpod_cluster_arn: str, eks_cluster_arn: str) -> None:
        """Let the EBS CSI driver's role attach these volumes to HyperPod nodes and use their key."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="HyperPodNodeVolumes",
                actions=["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"],
                resources=[hyperpod_cluster_arn],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="DescribeCluster", actions=["eks:DescribeCluster"], resources=[eks_cluster_arn])
        )
        for statement in ebs_csi_key_statements(self.key.key_arn):
            role.add_to_principal_policy(statement)


def ebs_csi_key_statements(key_arn: str) -> list[iam.PolicyStatement]:
    """Exactly the KMS permissions the EKS user guide lists for the EBS CSI driver with a customer managed key
    ("Store Kubernetes volumes with Amazon EBS", step "KMS_Key_For_Encryption_On_EBS"): grant management only for
    grants that EC2 creates for the volume, plus the data-key operations EC2 performs on the driver's behalf."""
    return [
        iam.PolicyStatement(
            sid="EbsKeyGrants",
            actions=["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
            resources=[key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
        iam.PolicyStatement(
            sid="EbsKeyUse",
            actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
            resources=[key_arn],
        ),
    ]
