"""An endpoint's secrets (its API keys, a Hugging Face token) from AWS Secrets Manager, as files in its pods.

The AWS Secrets Store CSI provider (ASCP, the EKS add-on ``aws-secrets-store-csi-driver-provider``) mounts them
through a ``SecretProviderClass`` with ``usePodIdentity``: the provider fetches each secret with the *pod's* Pod
Identity role (the endpoint's, which may read only its own secrets), so the pods themselves need no egress to
Secrets Manager and no Kubernetes Secret holds a value. Sources (cited in docs/serving-contract.md): provider
``secrets-store-csi-driver-provider-aws`` 3.1.1 ``README.md`` (the ``objects`` fields, ``usePodIdentity``), Secrets
Store CSI driver v1.6.0 (the ``secrets-store.csi.x-k8s.io/v1`` object, the inline ``csi`` volume).

Files, not environment variables: a file is refreshed by the driver's rotation (an environment variable is not),
and keys stay out of every pod spec. vLLM 0.12.0 reads its keys once at start (``--api-key``, or ``--config`` with
``api-key: [k1, k2]``), the production-stack router reads ``VLLM_API_KEY``; the start wrappers below turn the file
into those, so a new key takes effect when the pods restart.
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
"""``HF_TOKEN_PATH``: huggingface_hub reads the token from this file at each ``get_token()`` (hub 2.4.0
``constants.py``, ``utils/_auth.py``)."""
VOLUME_NAME = "kvtiers-secrets"
RUN_DIR = "/run/kvtiers"
"""A memory-backed emptyDir of the engine where its start wrapper writes vLLM's key file (never on disk)."""
VLLM_KEY_CONFIG = f"{RUN_DIR}/vllm-api-keys.yaml"
"""vLLM's ``--config`` file (the extension must be ``yaml``: ``utils/argparse_utils.py``, ``load_config_file``)."""
KEY_CHARACTERS = "A-Za-z0-9._~+/=-"
"""Characters a key may hold: what Secrets Manager's generator emits without punctuation, plus the token68
characters of an HTTP bearer token (RFC 6750), and nothing that YAML or a shell would read."""
SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")

ENGINE_KEYS_TO_CONFIG = (
    f"umask 077 && set -f && keys=$(cat {SECRETS_DIR}/{API_KEY_FILE}) || exit 1; "
    f'n=0; {{ echo "api-key:"; for k in $keys; do case "$k" in *[!{KEY_CHARACTERS}]*) '
    f'echo "kvtiers: {SECRETS_DIR}/{API_KEY_FILE} holds a character outside [{KEY_CHARACTERS}]" >&2; exit 1;; esac; '
    f"n=$((n+1)); echo \"  - '$k'\"; done; }} > {VLLM_KEY_CONFIG} || exit 1; "
    f'[ "$n" -gt 0 ] || {{ echo "kvtiers: {SECRETS_DIR}/{API_KEY_FILE} holds no key" >&2; exit 1; }}; set +f'
)
"""The engine's start wrapper, first part: every whitespace-separated key of the mounted file as vLLM's ``api-key``
list in :data:`VLLM_KEY_CONFIG` (mode 0600; globbing off while the keys are split, on again for what follows), or a
start failure that says why (no key, a character a YAML scalar or
an HTTP header could not carry). The keys never reach the command line (``/proc/<pid>/cmdline``) or the
environment."""
ENGINE_CONFIG_ARGS = ("--config", VLLM_KEY_CONFIG)
"""Appended to ``vllm serve``'s arguments: vLLM 0.12.0 expands the file's keys after the positional model
(``FlexibleArgumentParser._pull_args_from_config``)."""
ROUTER_KEY_TO_ENV = (
    f"read -r VLLM_API_KEY _ < {SECRETS_DIR}/{API_KEY_FILE} || true; "
    f'[ -n "$VLLM_API_KEY" ] || {{ echo "kvtiers: {SECRETS_DIR}/{API_KEY_FILE} holds no key" >&2; exit 1; }}; '
    'export VLLM_API_KEY; exec "$0" "$@"'
)
"""The router's start command: the file's *first* key as ``VLLM_API_KEY``, which production-stack vllm-stack-0.1.12
sends (``Authorization: Bearer``) when it discovers the engines' models (``service_discovery.py``, read per call with
``os.getenv``; without it discovery finds no model). Clients' own ``Authorization`` headers are forwarded to the
engines unchanged (``request.py``), and the engines check them. A rotation puts the new key first."""


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
