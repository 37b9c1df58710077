"""What kvtiers' pod-side code supports of the images it runs in: the checks each chart makes before it renders the
L2 guard or the kvaware fallback into a pod. One message for the app and a library user (the app only maps its file
onto these props)."""

from __future__ import annotations

from kvtiers.catalog.versions import (
    KVAWARE_FALLBACK_ROUTER,
    L2_GUARD_LMCACHE,
    ROUTER_IMAGES,
    router_release,
)


def check_l2_guard(where: str, *, image: str, lmcache_version: str) -> None:
    """An engine that mounts the L2 carries the LMCache the L2 guard is tested with: the guard refuses to start
    under another (the engines would crash-loop), and without the guard an unreadable chunk gives wrong output."""
    if lmcache_version != L2_GUARD_LMCACHE:
        raise ValueError(
            f"{where}: engine image {image} carries LMCache {lmcache_version}, but the L2 guard (which turns L2 read "
            f"failures into recomputes) is tested with LMCache {L2_GUARD_LMCACHE} only; use an engine image with "
            f"LMCache {L2_GUARD_LMCACHE} (version matrix: kvtiers.catalog.versions) or serve without the L2"
        )


def check_kvaware_router(where: str, *, router_image: str, engine_lmcache: str) -> None:
    """A kvaware router is a release the kvaware fallback was reviewed against (it refuses to load under other code,
    so the router would not start), and carries the engines' LMCache (the controller protocol has no version
    negotiation)."""
    release = router_release(router_image)
    if release is None or release.production_stack != KVAWARE_FALLBACK_ROUTER:
        found = "an image outside the version matrix" if release is None else release.production_stack
        known = ", ".join(k for k, r in ROUTER_IMAGES.items() if r.production_stack == KVAWARE_FALLBACK_ROUTER)
        raise ValueError(
            f"{where}: kvaware routing needs a router of {KVAWARE_FALLBACK_ROUTER} (kvtiers' fallback for departed "
            f"engines, which keeps them from answering HTTP 500, is reviewed against that release only); router "
            f"image {router_image} is {found}; use {known}"
        )
    if release.lmcache != engine_lmcache:
        raise ValueError(
            f"{where}: kvaware routing needs engines and router on one LMCache release (the controller protocol has "
            f"no version negotiation), but the engine image carries LMCache {engine_lmcache} and router image "
            f"{router_image} pins LMCache {release.lmcache} (version matrix: kvtiers.catalog.versions)"
        )
