"""HTTP to one port of one pod through the API server's port-forward subresource (``pods/<name>/portforward``), with
the caller's kubeconfig and the kubernetes client's own ``kubernetes.stream.portforward``.

Why not the pod proxy (:mod:`kvtiers.cli.verify.proxy`): the API server's authentication filter deletes the
``Authorization`` header of every request it authenticated, before any handler sees it (k8s.io/apiserver
``pkg/endpoints/filters/authentication.go`` ``WithAuthentication``, ``req.Header.Del("Authorization")``, at tag
kubernetes-1.34.0), so a request through the proxy can never carry an endpoint's API key, and an engine that checks
the key (``kvtiers_api_auth.KeyCheckMiddleware``) answers it 401. Through a port-forward, the bytes written here reach the
engine as they are: the key travels inside the tunnel, where the API server does not parse HTTP.

Why a port-forward reaches an engine that the NetworkPolicy closes to everyone but its router (and the proxy's
subnets): the API server hands the stream to the kubelet, which hands it to the container runtime's streaming
server; containerd enters the pod sandbox's network namespace and dials ``localhost:<port>`` there
(``internal/cri/server/sandbox_portforward_linux.go`` ``portForward``, ``net.Dial("tcp4", "localhost:<port>")``
inside ``NetNS.Do``, at containerd v2.1.0; the same in ``pkg/cri/sbserver/`` at v1.7.27). The connection is the
pod's own loopback traffic, never pod ingress, so no NetworkPolicy rule is involved. It needs RBAC ``get`` on
``pods/portforward`` in the serving namespace (the client's websocket upgrade is a ``GET``: k8s.io/apiserver
``pkg/endpoints/request/requestinfo.go`` at kubernetes-1.34.0) and ``create`` (required as well from Kubernetes 1.35,
``AuthorizePodWebsocketUpgradeCreatePermission``; what ``kubectl port-forward`` needs). Which containerd the HyperPod nodes' AMI ships is not read here [U];
both lines above connect the same way. The engine must listen on the pod's loopback too (vLLM binds every address
unless ``--host`` says otherwise).

The tunnel is the websocket protocol ``v4.channel.k8s.io``, which the client asks for: per port, a data channel and
an error channel, each opened by a frame holding the port; a failure inside the pod (nothing listens, the sandbox is
gone) arrives as text on the error channel and ends the stream.
"""

from __future__ import annotations

import http.client
import json

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from kvtiers.cli.verify.proxy import ProxyResponse


class PortForwardError(Exception):
    """The port-forward to ``pod`` could not be opened (``status``: the API server's HTTP answer to the upgrade, 0
    when there was none), or the stream failed before the whole response came back."""

    def __init__(self, pod: str, port: int, status: int, message: str) -> None:
        super().__init__(pod, port, status, message)
        self.pod, self.port, self.status, self.message = pod, port, status, message

    def __str__(self) -> str:
        status = f"HTTP {self.status}: " if self.status else ""
        return f"port-forward to pod {self.pod} port {self.port}: {status}{self.message}"


def _upgrade_refused(exc: ApiException) -> tuple[int, str]:
    """The API server's status and message for a refused upgrade: ``portforward_call`` wraps websocket-client's
    ``WebSocketBadStatusException`` (status, body) in an ``ApiException`` with status 0, raised while handling it."""
    cause = exc.__context__
    status = getattr(cause, "status_code", None)
    body = getattr(cause, "resp_body", None)
    if not isinstance(status, int):
        return exc.status or 0, str(exc.reason or exc)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        text = json.loads(text).get("message", text)
    except (ValueError, AttributeError):
        pass
    return status, text[:300]


def request(
    api: ApiClient,
    namespace: str,
    pod: str,
    port: int,
    path: str,
    method: str = "GET",
    body: dict | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> ProxyResponse:
    """``<method> /<path>`` on ``pod``'s ``port`` over a fresh port-forward; the response, whatever its status.

    Raises :class:`PortForwardError` when the API server refuses the port-forward (RBAC, no such pod), when the
    pod's side fails (the error channel's text), or when the response does not arrive within ``timeout``."""
    from kubernetes.stream import portforward

    try:
        forward = portforward(CoreV1Api(api).connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
    except ApiException as exc:
        status, message = _upgrade_refused(exc)
        raise PortForwardError(pod, port, status, message) from None
    sock = forward.socket(port)
    sock.settimeout(timeout)
    connection = http.client.HTTPConnection("localhost", port, timeout=timeout)
    connection.sock = sock  # type: ignore[assignment]  # the tunnel's end; HTTPConnection never connects itself
    data = json.dumps(body).encode() if body is not None else None
    sent = {"Accept": "*/*", **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})}
    try:
        # HTTP/1.1 keep-alive: the response ends at its length, and the tunnel is closed from this side only after
        # it was read (the client's relay drops data it has not yet handed over when the far side closes first).
        connection.request(method, "/" + path.lstrip("/"), body=data, headers=sent)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        return ProxyResponse(response.status, text)
    except (OSError, http.client.HTTPException) as exc:
        reason = forward.error(port) or f"{type(exc).__name__}: {exc}"
        raise PortForwardError(pod, port, 0, reason.strip()) from None
    finally:
        connection.close()
        forward.close()
