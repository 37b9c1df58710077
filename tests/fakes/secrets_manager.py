"""Secrets Manager's ``GetSecretValue`` for the verify and bench tests: named secrets, and botocore's own
``ClientError`` (with AWS's error code) for a secret that does not exist or may not be read."""

from __future__ import annotations

from botocore.exceptions import ClientError


class FakeSecretsManager:
    """:param previous: the ``AWSPREVIOUS`` version of some secrets (what the last ``put-secret-value`` replaced)."""

    def __init__(
        self, secrets: dict[str, str], denied: tuple[str, ...] = (), previous: dict[str, str] | None = None
    ) -> None:
        self.secrets, self.denied, self.previous = dict(secrets), denied, dict(previous or {})
        self.reads: list[str] = []

    def get_secret_value(self, *, SecretId: str, VersionStage: str = "AWSCURRENT") -> dict:
        if VersionStage == "AWSCURRENT":
            self.reads.append(SecretId)
        if SecretId in self.denied:
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "GetSecretValue"
            )
        versions = (
            self.secrets if VersionStage == "AWSCURRENT" else self.previous if VersionStage == "AWSPREVIOUS" else {}
        )
        if SecretId not in versions:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "Secrets Manager can't find it"}},
                "GetSecretValue",
            )
        return {"Name": SecretId, "SecretString": versions[SecretId]}


def endpoint_keys(endpoint: str) -> str:
    """What an authenticated endpoint's secret holds in these tests (and its engines' key file): a new and an old
    key, the new one first."""
    return f"new-{endpoint} old-{endpoint}"


def for_environment(env) -> FakeSecretsManager:
    """Every authenticated endpoint's secret, holding a new and an old key."""
    return FakeSecretsManager(
        {env.api_key_secret_name(e.name): endpoint_keys(e.name) for e in env.serving.endpoints if e.authenticated}
    )
