"""An endpoint's API key, read from Secrets Manager the way its pods read it (``kvtiers.k8s_charts.secrets``)."""

from __future__ import annotations

from typing import Any

from kvtiers.config.schema import Environment

UNAUTHORIZED_HINT = (
    "the endpoint checks an API key (api_key, default on): give --config and --endpoint to read it from Secrets "
    "Manager, or --api-key"
)


class ApiKeyError(Exception):
    """The key could not be read: the message says which secret and why."""


def read_api_keys(secrets_manager: Any, secret_name: str) -> tuple[str, ...]:
    """The secret's keys, in order (during a rotation, two)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        value = secrets_manager.get_secret_value(SecretId=secret_name)["SecretString"]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ApiKeyError(
            f"secretsmanager:GetSecretValue {secret_name}: {error.get('Code')}: {error.get('Message')} (is the "
            "workloads stack deployed, and may your AWS identity read the secret and decrypt with its KMS key?)"
        ) from None
    except BotoCoreError as exc:
        raise ApiKeyError(f"secretsmanager:GetSecretValue {secret_name}: {exc}") from None
    keys = tuple(value.split())
    if not keys:
        raise ApiKeyError(f"secret {secret_name} holds no key (docs/runbooks.md, Rotate an endpoint's API key)")
    return keys


def read_retired_api_keys(secrets_manager: Any, secret_name: str, current: tuple[str, ...]) -> tuple[str, ...]:
    """The keys of the secret's previous version (``AWSPREVIOUS``) that its current one no longer holds: what a
    rotation's last step retired. None when the secret has no previous version."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        value = secrets_manager.get_secret_value(SecretId=secret_name, VersionStage="AWSPREVIOUS")["SecretString"]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ResourceNotFoundException":
            return ()
        raise ApiKeyError(
            f"secretsmanager:GetSecretValue {secret_name} (AWSPREVIOUS): {error.get('Code')}: {error.get('Message')}"
        ) from None
    except BotoCoreError as exc:
        raise ApiKeyError(f"secretsmanager:GetSecretValue {secret_name} (AWSPREVIOUS): {exc}") from None
    return tuple(key for key in value.split() if key not in current)


def read_api_key(secrets_manager: Any, secret_name: str) -> str:
    """The secret's first key (the one clients use; a rotation puts the new key first once every pod has it)."""
    return read_api_keys(secrets_manager, secret_name)[0]


def endpoint_api_key(env: Environment, endpoint: str, *, profile: str | None = None) -> str | None:
    """``endpoint``'s key from Secrets Manager, or None when the endpoint serves without one."""
    import boto3

    found = next((e for e in env.serving.endpoints if e.name == endpoint), None)
    if found is None:
        known = ", ".join(e.name for e in env.serving.endpoints) or "none"
        raise ApiKeyError(f"no endpoint named {endpoint!r} in the environment (known: {known})")
    if not found.authenticated:
        return None
    client = boto3.Session(profile_name=profile, region_name=env.region).client("secretsmanager")
    return read_api_key(client, env.api_key_secret_name(endpoint))
