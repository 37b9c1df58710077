"""Secrets Manager secrets for the serving endpoints, delivered to their pods as files by the AWS Secrets Store CSI
provider (ASCP), and the IAM that lets each endpoint read only its own.

:class:`SecretsStoreCsi` (one per cluster) installs the ``aws-secrets-store-csi-driver-provider`` EKS add-on (the
Secrets Store CSI driver and the AWS provider in one) and the KMS key the serving secrets are encrypted with.
:class:`EndpointSecretAccess` (one per endpoint) creates the endpoint's API-key secret and a Pod Identity role that
may read that secret (and the endpoint's Hugging Face token, if any), nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

import kvtiers.checks as check
from kvtiers.catalog.platform_defaults import (
    ADDON_VERSION_PATTERN,
    SECRETS_ROTATION_POLL_INTERVAL,
    SECRETS_STORE_CSI_PROVIDER_VERSION,
)
from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster, pod_identity_association, pod_identity_role
from kvtiers.k8s_charts.secrets import SECRET_NAME

SECRETS_STORE_ADDON = "aws-secrets-store-csi-driver-provider"
API_KEY_LENGTH = 64
"""Characters of a generated API key: letters and digits only (no punctuation: the key travels in an HTTP header,
a YAML file and a shell variable), about 380 bits."""
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def addon_configuration(*, rotation_poll_interval: str) -> dict[str, Any]:
    """The add-on's configuration values: the driver's secret rotation (alpha in driver v1.6.0, off by default) at
    ``rotation_poll_interval``, and the provider on every node, tainted GPU groups included (the chart's provider
    DaemonSet tolerates nothing; the driver's tolerates everything). No ``syncSecret``: kvtiers reads files only, so
    the driver gets no cluster-wide write access to Secrets."""
    return {
        "tolerations": [{"operator": "Exists"}],
        "secrets-store-csi-driver": {"enableSecretRotation": True, "rotationPollInterval": rotation_poll_interval},
    }


class SecretsStoreCsi(Construct):
    """The ASCP EKS add-on and the serving secrets' KMS key.

    Attributes: ``addon`` (the ``CfnAddon``) and ``key`` (the KMS key, with its alias).

    :param scope: the parent construct.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster (its Pod Identity agent add-on goes first: the provider uses the pods' Pod
        Identity roles).
    :param key_alias: the key's alias (``alias/...``): the name under which you create a Hugging Face token secret
        before the first deploy of the workloads.
    :param version: the exact add-on version. @default ``platform_defaults.SECRETS_STORE_CSI_PROVIDER_VERSION``
    :param rotation_poll_interval: how old a pod's secret files must be before the driver fetches them again.
        @default ``"120s"`` (``platform_defaults.SECRETS_ROTATION_POLL_INTERVAL``: it bounds how soon a key change
        reaches the pods, not the cost)
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster,
        key_alias: str,
        version: str = SECRETS_STORE_CSI_PROVIDER_VERSION,
        rotation_poll_interval: str = SECRETS_ROTATION_POLL_INTERVAL,
    ) -> None:
        super().__init__(scope, id)
        check.matches("SecretsStoreCsi", "version", version, ADDON_VERSION_PATTERN, "an exact EKS add-on version")
        check.matches("SecretsStoreCsi", "key_alias", key_alias, r"^alias/[A-Za-z0-9/_-]{1,250}$", "a KMS alias")
        check.matches(
            "SecretsStoreCsi",
            "rotation_poll_interval",
            rotation_poll_interval,
            r"^\d+[smh]$",
            "a duration like '3600s'",
        )
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            alias=key_alias,
            description="kvtiers serving secrets (endpoint API keys, Hugging Face tokens) in Secrets Manager",
        )
        self.addon: Construct | None = eks_cluster.add_addon(
            SECRETS_STORE_ADDON,
            version,
            configuration_values=addon_configuration(rotation_poll_interval=rotation_poll_interval),
        )

    @staticmethod
    def from_secrets_store_attributes(scope: Construct, id: str, *, key_arn: str) -> ImportedSecretsStore:
        """The ASCP add-on and serving-secrets key of a cluster another stack or team owns, for the endpoints of
        this app to read their secrets with.

        :param key_arn: the serving-secrets KMS key's ARN (the endpoints' API-key secrets are encrypted with it).
        """
        return ImportedSecretsStore(scope, id, key_arn=key_arn)


class ImportedSecretsStore(Construct):
    """The ASCP add-on and serving-secrets key another stack or team installed
    (:meth:`SecretsStoreCsi.from_secrets_store_attributes`). ``addon`` is None: it is installed already."""

    def __init__(self, scope: Construct, id: str, *, key_arn: str) -> None:
        super().__init__(scope, id)
        self.key: kms.IKey = kms.Key.from_key_arn(self, "Key", key_arn)
        self.addon: Construct | None = None


def secret_arn_pattern(scope: Construct, name: str) -> str:
    """The ARN of the secret named ``name`` in ``scope``'s account and region (Secrets Manager appends six random
    characters)."""
    return cdk.Stack.of(scope).format_arn(
        service="secretsmanager",
        resource="secret",
        resource_name=f"{name}-??????",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )


class EndpointSecretAccess(Construct):
    """One endpoint's API-key secret and the Pod Identity role its pods read their secrets with.

    Attributes: ``api_key`` (the ``Secret``, or None), ``role`` and ``associations``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster of the service accounts.
    :param namespace: the namespace of the service accounts.
    :param key: the KMS key that encrypts the API-key secret and that the Hugging Face token secret is encrypted with
        (``SecretsStoreCsi.key``); the role may decrypt with it only through Secrets Manager, for these secrets.
    :param api_key_secret_name: the name of the API-key secret to create (a generated key of letters and digits).
        @default None: no API key
    :param hf_token_secret_name: the name of an existing secret with a Hugging Face token, which the role may read.
        @default None
    :param service_accounts: the service accounts to bind to the role with Pod Identity associations. @default none
    :param role: a role that already has those service accounts' associations (for example the engines' S3 weights
        role), granted the reads instead of a new role. @default a new Pod Identity role
    :param account_roles: roles of their own for some of ``service_accounts``, by account (a router, which must not
        hold the engines' weights role): each of those accounts is bound to its role instead of ``role``, and the
        role is granted the same reads. @default none: every account is bound to ``role``
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        key: kms.IKey,
        api_key_secret_name: str | None = None,
        hf_token_secret_name: str | None = None,
        service_accounts: Sequence[str] = (),
        role: iam.IRole | None = None,
        account_roles: Mapping[str, iam.IRole] | None = None,
    ) -> None:
        super().__init__(scope, id)
        check.matches("EndpointSecretAccess", "namespace", namespace, DNS1123_LABEL, "a Kubernetes namespace name")
        for field, name in (
            ("api_key_secret_name", api_key_secret_name),
            ("hf_token_secret_name", hf_token_secret_name),
        ):
            if name is not None:
                check.matches("EndpointSecretAccess", field, name, SECRET_NAME.pattern, "a Secrets Manager secret name")
        if api_key_secret_name is None and hf_token_secret_name is None:
            raise ValueError("EndpointSecretAccess: give api_key_secret_name, hf_token_secret_name or both")
        self.api_key: secretsmanager.Secret | None = None
        arns: list[str] = []
        if api_key_secret_name is not None:
            self.api_key = secretsmanager.Secret(
                self,
                "ApiKey",
                secret_name=api_key_secret_name,
                description=f"API keys of the kvtiers endpoint's clients (namespace {namespace}), whitespace-separated",
                encryption_key=key,
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    exclude_punctuation=True, include_space=False, password_length=API_KEY_LENGTH
                ),
                # A deleted stack must not leave a key that still opens a recreated endpoint of the same name.
                removal_policy=cdk.RemovalPolicy.DESTROY,
            )
            arns.append(self.api_key.secret_arn)
        if hf_token_secret_name is not None:
            arns.append(secret_arn_pattern(self, hf_token_secret_name))
        self.role: iam.IRole = (
            role
            if role is not None
            else pod_identity_role(
                self,
                "Role",
                cluster=cluster,
                description=f"read one kvtiers endpoint's secrets (namespace {namespace})",
            )
        )
        policy = iam.Policy(
            self,
            "Read",
            statements=[
                iam.PolicyStatement(
                    sid="ReadEndpointSecrets",
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    resources=arns,
                ),
                iam.PolicyStatement(
                    sid="DecryptEndpointSecrets",
                    actions=["kms:Decrypt"],
                    resources=[key.key_arn],
                    conditions={
                        "StringEquals": {"kms:ViaService": f"secretsmanager.{cdk.Aws.REGION}.amazonaws.com"},
                        "StringLike": {"kms:EncryptionContext:SecretARN": arns},
                    },
                ),
            ],
        )
        account_roles = dict(account_roles or {})
        unknown = sorted(set(account_roles) - set(service_accounts))
        if unknown:
            raise ValueError(f"EndpointSecretAccess: account_roles names {unknown}, which are not in service_accounts")
        readers: list[iam.IRole] = []
        for reader in (self.role, *account_roles.values()):
            if not any(reader is r for r in readers):
                readers.append(reader)
                policy.attach_to_role(reader)
        self.associations = [
            pod_identity_association(
                self,
                f"Association{i}",
                cluster_name=cluster.cluster_name,
                namespace=namespace,
                service_account=account,
                role=account_roles.get(account, self.role),
            )
            for i, account in enumerate(service_accounts)
        ]
        for association in self.associations:
            # The pods must not start before their role may read what they mount.
            association.node.add_dependency(policy)
