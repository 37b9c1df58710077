"""One cdk8s Chart per self-managed endpoint (one EKS manifest): engines, LMCache config and router.

The serving Namespace and the Curvine L2 claim are created by other charts, which the app orders first.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from kvtiers.k8s_charts import checks, names
from kvtiers.k8s_charts.l2 import L2Volume
from kvtiers.k8s_charts.serving.endpoint import EngineDeployment
from kvtiers.k8s_charts.serving.props import Engine, Router
from kvtiers.k8s_charts.serving.router import RouterDeployment
from kvtiers.k8s_charts.vllm import LMCache

MAX_NAME_LENGTH, _ = names.longest_endpoint_name("self_managed")
"""Service names are DNS labels of at most 63 characters; the longest the endpoint's name prefixes is the router's
load balancer Service."""


class ServingChart(cdk8s.Chart):
    """One self-managed endpoint: vLLM + LMCache engines and the production-stack router, in one namespace.

    :param name: the endpoint's name: prefixes every object and labels every pod (``kvtiers.io/endpoint``).
    :param namespace: the namespace of the engines and the router (the router discovers engines there only).
    :param engine: the vLLM pods.
    :param router: the router in front of them.
    :param lmcache: the engines' LMCache; its ``controller`` is set exactly when the router routes ``kvaware``.
    :param hash_seed: ``PYTHONHASHSEED`` of every engine and router (chunk and prefix hashes depend on it: every pod
        that shares an L2 needs the same seed).
    :param l2: the Curvine L2 claim, mounted when given; ``lmcache.remote_url`` must then point below its mount path.
        @default None (no L2: LMCache keeps its L1 only)
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
        lmcache: LMCache,
        hash_seed: str,
        l2: L2Volume | None = None,
    ) -> None:
        checks.dns_label("ServingChart", "name", name, MAX_NAME_LENGTH)
        checks.dns_label("ServingChart", "namespace", namespace)
        checks.hash_seed("ServingChart", hash_seed)
        kvaware = router.routing == "kvaware"
        if kvaware and lmcache.controller is None:
            raise ValueError(
                "ServingChart: lmcache.controller is required when router.routing is 'kvaware' (the engines report "
                "their cache to the controller in the router)"
            )
        if not kvaware and lmcache.controller is not None:
            raise ValueError(
                f"ServingChart: lmcache.controller is set but router.routing is {router.routing!r}; only 'kvaware' "
                "hosts a controller"
            )
        if l2 is not None and lmcache.remote_url is None:
            raise ValueError(
                f"ServingChart: lmcache.remote_url is required when l2 is set (LMCache would never use the claim "
                f"{l2.claim_name} mounted at {l2.mount_path})"
            )
        if l2 is None and lmcache.remote_url is not None:
            raise ValueError(
                f"ServingChart: lmcache.remote_url {lmcache.remote_url!r} is set but l2 is not (nothing is mounted "
                "there)"
            )
        if l2 is not None and lmcache.remote_url is not None and not l2.holds(lmcache.remote_url):
            raise ValueError(
                f"ServingChart: lmcache.remote_url {lmcache.remote_url!r} is not below l2.mount_path {l2.mount_path!r}"
            )
        l1_gib = lmcache.max_local_cpu_size_gib * engine.tensor_parallel_size
        if engine.memory_gib < l1_gib + engine.shm_gib:
            raise ValueError(
                f"ServingChart: engine.memory_gib {engine.memory_gib} is less than the LMCache L1 of its "
                f"{engine.tensor_parallel_size} GPU worker(s) ({l1_gib:g} GiB) plus engine.shm_gib {engine.shm_gib}"
            )
        super().__init__(scope, id, namespace=namespace, disable_resource_name_hashes=True)
        self.engine = EngineDeployment(
            self, "Engine", name=name, namespace=namespace, engine=engine, lmcache=lmcache, hash_seed=hash_seed, l2=l2
        )
        self.router = RouterDeployment(
            self,
            "Router",
            name=name,
            namespace=namespace,
            router=router,
            controller=lmcache.controller,
            hash_seed=hash_seed,
        )
