"""One cdk8s Chart per self-managed endpoint (one EKS manifest): engines, LMCache config and router.

The serving Namespace and the Curvine L2 claim are created by other charts, which the app orders first.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from kvtiers import checks
from kvtiers.catalog.serving_defaults import HASH_SEED
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.l2 import L2Volume, l2_owner
from kvtiers.k8s_charts.secrets import EndpointSecrets, secret_provider_class
from kvtiers.k8s_charts.serving.endpoint import EngineDeployment
from kvtiers.k8s_charts.serving.props import Engine, Router
from kvtiers.k8s_charts.serving.releases import check_kvaware_router, check_l2_guard
from kvtiers.k8s_charts.serving.router import HubTokenizerCopy, RouterDeployment, TokenizerCopy
from kvtiers.k8s_charts.vllm import LMCache, LMCacheController, S3Weights

MAX_NAME_LENGTH, _ = names.longest_endpoint_name("self_managed")
"""Service names are DNS labels of at most 63 characters; the longest the endpoint's name prefixes is the router's
load balancer Service."""


class ServingChart(cdk8s.Chart):
    """One self-managed endpoint: vLLM + LMCache engines and the production-stack router, in one namespace.

    The chart derives what must agree between its parts: the LMCache settings (the engine's L1 per GPU worker; the
    router's controller exactly when it routes ``kvaware``), the endpoint's L2 namespace (``l2_namespace``: from the
    engine's model, revision, dtype, tensor-parallel size and image's LMCache, and ``hash_seed``) and LMCache's
    ``remote_url``: the endpoint's own L2 directory (``l2_mount``), the only part of the claim its engines mount.

    Attributes: ``engine`` and ``router`` (the deployments), ``lmcache``, ``l2_namespace`` and ``l2_mount``.

    :param name: the endpoint's name: prefixes every object and labels every pod (``kvtiers.io/endpoint``).
    :param namespace: the namespace of the engines and the router (the router discovers engines there only).
    :param engine: the vLLM pods.
    :param router: the router in front of them.
    :param hash_seed: ``PYTHONHASHSEED`` of every engine and router (chunk and prefix hashes depend on it: every pod
        that shares an L2 needs the same seed), and part of the L2 namespace. @default ``"0"``
    :param l2: the Curvine L2 claim, mounted when given; LMCache stores below its mount path. @default None (no L2:
        LMCache keeps its L1 only)
    :param l2_share_group: the L2 directory this endpoint shares with the other endpoints of the group (the same
        model and L2 namespace; the caller checks that). @default None: a directory of its own, which no other
        endpoint's pods mount
    :param secrets: the Secrets Manager secrets the engines and the router read as files (the endpoint's API keys,
        a Hugging Face token), through the endpoint's ``SecretProviderClass``; the pods' ServiceAccounts need a Pod
        Identity role that may read them (:class:`kvtiers.constructs.endpoint_secrets.EndpointSecretAccess`).
        @default None: no API key (anyone the NetworkPolicies admit may call the endpoint) and no Hugging Face token
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        namespace: str,
        engine: Engine,
        router: Router,
        hash_seed: str = HASH_SEED,
        l2: L2Volume | None = None,
        l2_share_group: str | None = None,
        secrets: EndpointSecrets | None = None,
    ) -> None:
        checks.dns_label("ServingChart", "name", name, MAX_NAME_LENGTH)
        checks.dns_label("ServingChart", "namespace", namespace)
        checks.hash_seed("ServingChart", hash_seed)
        if l2_share_group is not None:
            checks.dns_label("ServingChart", "l2_share_group", l2_share_group)
        where = f"ServingChart {name!r}"
        if l2 is not None:
            check_l2_guard(where, image=engine.image, lmcache_version=engine.lmcache)
        if router.routing == "kvaware":
            check_kvaware_router(where, router_image=router.image, engine_lmcache=engine.lmcache)
            _check_kvaware_tokenizer(where, engine, secrets)
        self.l2_namespace = engine.l2_namespace(hash_seed)
        owner = l2_owner(endpoint=name, share_group=l2_share_group)
        self.l2_mount = l2.mount(self.l2_namespace, owner=owner) if l2 is not None else None
        self.lmcache = LMCache(
            max_local_cpu_size_gib=engine.l1_gib,
            remote_url=self.l2_mount.remote_url if self.l2_mount is not None else None,
            controller=LMCacheController() if router.routing == "kvaware" else None,
        )
        super().__init__(scope, id, namespace=namespace, disable_resource_name_hashes=True)
        self.engine = EngineDeployment(
            self,
            "Engine",
            name=name,
            namespace=namespace,
            engine=engine,
            lmcache=self.lmcache,
            hash_seed=hash_seed,
            l2=self.l2_mount,
            secrets=secrets,
        )
        self.router = RouterDeployment(
            self,
            "Router",
            name=name,
            namespace=namespace,
            router=router,
            controller=self.lmcache.controller,
            hash_seed=hash_seed,
            secrets=secrets,
            tokenizer=_tokenizer_copy(engine, router),
        )
        self.secret_provider_class = (
            secret_provider_class(
                self,
                "Secrets",
                endpoint=name,
                namespace=namespace,
                labels=names.component_labels(name, "secrets"),
                secrets=secrets,
            )
            if secrets is not None
            else None
        )


def _tokenizer_copy(engine: Engine, router: Router) -> TokenizerCopy | HubTokenizerCopy | None:
    """kvaware's tokenizer from the engines' own source: their S3 copy, or their pinned Hugging Face revision (an
    unpinned model is ``main`` on both sides)."""
    if router.routing != "kvaware":
        return None
    if isinstance(engine.weights, S3Weights):
        return TokenizerCopy(model=engine.model, weights=engine.weights, image=engine.model_sync_image)
    if engine.revision is not None:
        return HubTokenizerCopy(model=engine.model, revision=engine.revision, image=router.image)
    return None


def _check_kvaware_tokenizer(where: str, engine: Engine, secrets: EndpointSecrets | None) -> None:
    """kvaware tokenizes in the router, which loads a Hub model's tokenizer by the served name: a gated model needs
    the Hugging Face token (without it the router retries on every request and falls back to a blocking /tokenize
    call to an engine). With S3 weights it copies the tokenizer from S3 instead."""
    gated = not isinstance(engine.weights, S3Weights) and engine.shape.gated
    if gated and (secrets is None or secrets.hf_token_secret is None):
        raise ValueError(
            f"{where}: kvaware routing with the gated model {engine.model!r} from the Hugging Face Hub needs "
            "secrets=EndpointSecrets(hf_token_secret=...): the router loads the tokenizer from the Hub"
        )
