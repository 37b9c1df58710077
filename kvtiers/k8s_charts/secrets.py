"""An endpoint's secrets (its API keys, a Hugging Face token) from AWS Secrets Manager, as files in its pods.

The AWS Secrets Store CSI provider (ASCP, the EKS add-on ``aws-secrets-store-csi-driver-provider``) mounts them
through a ``SecretProviderClass`` with ``usePodIdentity``: the provider fetches each secret with the *pod's* Pod
Identity role (the endpoint's, which may read only its own secrets), so the pods themselves need no egress to
Secrets Manager and no Kubernetes Secret holds a value. Sources (cited in docs/serving-contract.md): provider
``secrets-store-csi-driver-provider-aws`` 3.1.1 ``README.md`` (the ``objects`` fields, ``usePodIdentity``), Secrets
Store CSI driver v1.6.0 (the ``secrets-store.csi.x-k8s.io/v1`` object, the inline ``csi`` volume).

Files, not environment variables: a file is refreshed by the driver's rotation (an environment variable is not),
and keys stay out of every pod spec. The key checks (``kvtiers_api_auth``, in the router and in each engine) read the
API-key file again when it changes, so a rotated key takes effect without a restart; huggingface_hub reads the token file at each use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The charts' types, imported where used: ``kvtiers plan`` reads EndpointSecrets without cdk8s's runtime.
    import cdk8s
    from cdk8s_plus_33 import k8s
    from constructs import Construct

SECRET_PROVIDER_CLASS_API = "secrets-store.csi.x-k8s.io/v1"
SECRETS_STORE_DRIVER = "secrets-store.csi.k8s.io"
SECRETS_DIR = "/var/run/kvtiers/secrets"
"""Where the CSI volume is mounted (read-only) in the engine and router containers."""
API_KEY_FILE = "api-key"
"""The endpoint's API keys, whitespace-separated: during a rotation the secret holds the new key and the old one."""
HF_TOKEN_FILE = "hf-token"
HF_TOKEN_PATH = f"{SECRETS_DIR}/{HF_TOKEN_FILE}"
"""``HF_TOKEN_PATH``: huggingface_hub reads the token from this file at each ``get_token()`` (hub 0.34.0, the router
image's pin: ``constants.py``, ``utils/_auth.py``)."""
VOLUME_NAME = "kvtiers-secrets"
SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
API_KEY_FILE_ENV = "KVTIERS_API_KEY_FILE"
"""Where the key checks (``kvtiers_api_auth.py``, in the router and in each engine) read the endpoint's keys; they
re-read the file when the driver's rotation rewrites it. No key is on a command line: vLLM 0.12.0 logs every
non-default argument at start (``entrypoints/utils.py`` ``log_non_default_args``, called by ``api_server.py``), an
``--api-key`` included, and checks it only under ``/v1`` (its SageMaker ``/invocations`` route serves completions
without one)."""
API_AUTH_MODULE = "kvtiers_api_auth"
"""The key check the router loads with ``--callbacks`` and the engines with ``--middleware``, from their ConfigMaps."""
ENGINE_KEY_CHECK = f"{API_AUTH_MODULE}.KeyCheckMiddleware"
"""What the engines' ``--middleware`` names: an ASGI class, which vLLM 0.12.0's ``build_app`` adds with
``app.add_middleware`` (``entrypoints/openai/api_server.py``)."""


@dataclass(frozen=True, kw_only=True)
class EndpointSecrets:
    """Which Secrets Manager secrets an endpoint's pods read, and where.

    :param region: the secrets' region (given, so the provider does not look it up from the node on every mount).
    :param api_key_secret: name or ARN of the secret with the endpoint's API keys (whitespace-separated). @default
        None: the endpoint serves without a key
    :param hf_token_secret: name or ARN of the secret with a Hugging Face token, for the engines (Hub weights) and a
        kvaware router (its tokenizer). @default None
    """

    region: str
    api_key_secret: str | None = None
    hf_token_secret: str | None = None

    def __post_init__(self) -> None:
        if not re.match(r"^[a-z]{2}(-gov)?-[a-z]+-\d$", self.region):
            raise ValueError(f"EndpointSecrets: region {self.region!r} is not an AWS region such as 'us-east-1'")
        for field in ("api_key_secret", "hf_token_secret"):
            value = getattr(self, field)
            if value is not None and not (value.startswith("arn:") or SECRET_NAME.match(value)):
                raise ValueError(
                    f"EndpointSecrets: {field} {value!r} is neither a Secrets Manager secret name (letters, digits, "
                    "/_+=.@-) nor an ARN"
                )
        if self.api_key_secret is None and self.hf_token_secret is None:
            raise ValueError("EndpointSecrets: give api_key_secret, hf_token_secret or both (or no EndpointSecrets)")

    @property
    def objects(self) -> list[dict[str, str]]:
        """The provider's ``objects``: one file per secret, named by its alias."""
        pairs = ((self.api_key_secret, API_KEY_FILE), (self.hf_token_secret, HF_TOKEN_FILE))
        return [
            {"objectName": secret, "objectType": "secretsmanager", "objectAlias": alias}
            for secret, alias in pairs
            if secret is not None
        ]


def provider_class_name(endpoint: str) -> str:
    return f"{endpoint}-secrets"


def secret_provider_class(
    scope: Construct, id: str, *, endpoint: str, namespace: str, labels: dict[str, str], secrets: EndpointSecrets
) -> cdk8s.ApiObject:
    """The endpoint's ``SecretProviderClass`` (provider ``aws``, Pod Identity)."""
    import cdk8s
    import yaml

    spec: dict[str, Any] = {
        "provider": "aws",
        "parameters": {
            "region": secrets.region,
            "usePodIdentity": "true",
            "objects": yaml.safe_dump(secrets.objects, sort_keys=False),
        },
    }
    obj = cdk8s.ApiObject(
        scope,
        id,
        api_version=SECRET_PROVIDER_CLASS_API,
        kind="SecretProviderClass",
        metadata=cdk8s.ApiObjectMetadata(name=provider_class_name(endpoint), namespace=namespace, labels=labels),
    )
    obj.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
    return obj


def secrets_volume(endpoint: str) -> k8s.Volume:
    """The inline CSI volume (allowed by Pod Security ``restricted``), read-only."""
    from cdk8s_plus_33 import k8s

    return k8s.Volume(
        name=VOLUME_NAME,
        csi=k8s.CsiVolumeSource(
            driver=SECRETS_STORE_DRIVER,
            read_only=True,
            volume_attributes={"secretProviderClass": provider_class_name(endpoint)},
        ),
    )


def secrets_mount() -> k8s.VolumeMount:
    from cdk8s_plus_33 import k8s

    return k8s.VolumeMount(name=VOLUME_NAME, mount_path=SECRETS_DIR, read_only=True)
