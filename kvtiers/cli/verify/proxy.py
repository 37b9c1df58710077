"""HTTP through the Kubernetes API server's proxy subresource (pods and services), with the caller's kubeconfig.

No direct network path to pod IPs is needed: the API server relays the request, which also makes the checks
testable against a local fake API server. The API server removes the caller's ``Authorization`` header before it
relays (k8s.io/apiserver ``pkg/endpoints/filters/authentication.go`` at kubernetes-1.34.0), so a request that must
carry an endpoint's API key goes by port-forward instead (:mod:`kvtiers.cli.verify.portforward`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException


@dataclass(frozen=True)
class ProxyResponse:
    status: int
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self):
        return json.loads(self.text)


class ProxyError(Exception):
    """The API server could not be reached (not an HTTP error status from the target)."""


def request(
    api: ApiClient,
    kind: str,
    namespace: str,
    name: str,
    port: int,
    path: str,
    method: str = "GET",
    body: dict | None = None,
    timeout: float = 30.0,
) -> ProxyResponse:
    """``<method> /api/v1/namespaces/<ns>/<kind>/<name>:<port>/proxy/<path>``; ``kind`` is pods or services."""
    resource = f"/api/v1/namespaces/{namespace}/{kind}/{name}:{port}/proxy/{path.lstrip('/')}"
    headers = {"Accept": "*/*"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        raw = api.call_api(
            resource,
            method,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
    except ApiException as exc:
        return ProxyResponse(
            exc.status or 0, (exc.body or b"").decode() if isinstance(exc.body, bytes) else str(exc.body or exc.reason)
        )
    except Exception as exc:  # noqa: BLE001 - urllib3 raises many unrelated types for connection errors and timeouts
        raise ProxyError(f"{method} {resource}: {exc}") from None
    response = raw[0] if isinstance(raw, tuple) else raw
    data = response.data
    return ProxyResponse(response.status, data.decode() if isinstance(data, bytes) else str(data))
