"""An authenticated endpoint refuses a caller without its key: its secret holds a key, and a completion sent to the
router without one is answered 401 (vLLM's check on the engines' ``/v1`` routes, relayed by the router).

The request goes through the Kubernetes API server's service proxy, which removes every ``Authorization`` header
(the caller's credentials for the API server), so verify cannot send the key that way: ``kvtiers bench -c <env>
--endpoint <name> --url <router>`` sends it from inside the VPC.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient

from kvtiers.cli.api_key import ApiKeyError, read_api_key
from kvtiers.cli.verify import proxy
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names

NAME = "API key required"


def check_api_key(secrets_manager: Any, api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    area, ns = f"endpoint:{endpoint.name}", env.serving.namespace
    router = names.router_name(endpoint.name)
    secret = env.api_key_secret_name(endpoint.name)
    if secrets_manager is None:
        return failed(area, NAME, "no secretsmanager client", "AWS credentials and region")
    try:
        read_api_key(secrets_manager, secret)
    except ApiKeyError as exc:
        return failed(area, NAME, str(exc), f"aws secretsmanager describe-secret --secret-id {secret}")
    body = {"model": endpoint.model, "prompt": "kvtiers verify", "max_tokens": 1}
    path = "v1/completions" if endpoint.api == "completions" else "v1/chat/completions"
    if endpoint.api == "chat":
        body = {"model": endpoint.model, "messages": [{"role": "user", "content": "kvtiers verify"}], "max_tokens": 1}
    hint = (
        f"kubectl -n {ns} get deployment/{router} -o yaml: its --callbacks must name kvtiers_api_auth.callbacks and "
        "KVTIERS_API_KEY_FILE the mounted key file; the router's log says why it did not load"
    )
    try:
        answer = proxy.request(api, "services", ns, router, names.ROUTER_SERVICE_PORT, path, "POST", body)
    except proxy.ProxyError as exc:
        return failed(area, NAME, str(exc), hint)
    if answer.status == 401:
        return passed(area, NAME, f"without a key the router answers 401; the key is in Secrets Manager ({secret})")
    return failed(
        area, NAME, f"without a key the router answered HTTP {answer.status}, not 401: {answer.text[:200]}", hint
    )
