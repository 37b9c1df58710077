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

import kvtiers.checks as check
from kvtiers.catalog.aws_limits import GP3_MIN_IOPS, GP3_MIN_MIBPS, gp3_problem
from kvtiers.catalog.platform_defaults import JOURNAL_VOLUME_GIB, META_VOLUME_GIB, SNAPSHOT_ON_DELETE, MasterCount

EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_CSI_MANAGED_POLICY = "service-role/AmazonEBSCSIDriverPolicy"


@dataclass(frozen=True, kw_only=True)
class MasterVolumes:
    """The two volumes of one Curvine master."""

    meta: ec2.Volume
    journal: ec2.Volume


class CurvineJournalVolumes(Construct):
    """KMS-encrypted gp3 volumes for the Curvine masters, tagged ``kvtiers.io/volume``.

    Attributes: ``volumes`` (``volumes[i]`` holds master ``i``'s meta and journal volumes), ``key`` and
    ``availability_zone``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param availability_zone: AZ name of the HyperPod subnet (a volume attaches only to nodes in its own AZ).
    :param masters: Curvine masters, 1, 3 or 5 (an odd Raft quorum); one pair of volumes each.
    :param meta_size_gib: size of each RocksDB metadata volume. @default 20 GiB, ample for millions of LMCache chunk
        files
    :param journal_size_gib: size of each Raft journal volume. @default 50 GiB of Raft log between snapshots
    :param iops: provisioned IOPS of every volume (gp3 limits apply). @default 3000, the gp3 baseline (no extra
        charge)
    :param throughput_mibps: provisioned throughput of every volume (gp3 limits apply). @default 125 MiB/s, the gp3
        baseline
    :param snapshot_on_delete: snapshot the volumes when the stack deletes them, so the L2 namespace metadata can be
        restored; otherwise they are destroyed. @default snapshot
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        availability_zone: str,
        masters: MasterCount,
        meta_size_gib: int = META_VOLUME_GIB,
        journal_size_gib: int = JOURNAL_VOLUME_GIB,
        iops: int = GP3_MIN_IOPS,
        throughput_mibps: int = GP3_MIN_MIBPS,
        snapshot_on_delete: bool = SNAPSHOT_ON_DELETE,
    ) -> None:
        super().__init__(scope, id)
        check.one_of("CurvineJournalVolumes", "masters", masters, MasterCount)
        for name, size in (("meta_size_gib", meta_size_gib), ("journal_size_gib", journal_size_gib)):
            problem = gp3_problem(size_gib=size, iops=iops, throughput_mibps=throughput_mibps)
            if problem:
                raise ValueError(f"CurvineJournalVolumes: {name}: {problem}")
        self.availability_zone = availability_zone
        self.key = kms.Key(self, "Key", enable_key_rotation=True, description="Curvine master metadata and journal")
        policy = cdk.RemovalPolicy.SNAPSHOT if snapshot_on_delete else cdk.RemovalPolicy.DESTROY
        self.volumes: list[MasterVolumes] = []
        for i in range(masters):
            self.volumes.append(
                MasterVolumes(
                    meta=self._volume(f"Master{i}Meta", meta_size_gib, iops, throughput_mibps, policy),
                    journal=self._volume(f"Master{i}Journal", journal_size_gib, iops, throughput_mibps, policy),
                )
            )

    def _volume(self, id: str, size: int, iops: int, throughput: int, policy: cdk.RemovalPolicy) -> ec2.Volume:
        volume = ec2.Volume(
            self,
            id,
            availability_zone=self.availability_zone,
            size=cdk.Size.gibibytes(size),
            volume_type=ec2.EbsDeviceVolumeType.GP3,
            iops=iops,
            throughput=throughput,
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
