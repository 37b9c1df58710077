"""The serving version matrix: the one place that says which vLLM and LMCache each pinned image carries.

Why a table in code and not just image tags: the engines and the router's embedded LMCache controller talk LMCache's
controller protocol (msgspec structs over ZMQ), and that protocol changes between LMCache releases without any
version negotiation. 0.3.11's controller cannot decode a 0.3.7 ``RegisterMsg`` and ignores 0.3.7's single KV admits,
so kvaware silently stops routing by cache. The rule this module encodes: engines and router must carry the same
LMCache. The schema checks it, the contract tests install exactly these LMCache versions from PyPI (``make test``
reads them from this file, without importing the package) and run their code, and the matrix in docs/serving.md is this table.

Only the standard library is imported here: the Makefile loads this file by path to learn the versions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineRelease:
    """A vLLM + LMCache engine image and what it carries."""

    vllm: str
    lmcache: str
    python: str
    source: str
    """Where each version comes from (upstream file at the release tag; PyPI upload dates for unpinned installs)."""


@dataclass(frozen=True)
class RouterRelease:
    """A production-stack router image and the LMCache (and vLLM) its build pins."""

    production_stack: str
    lmcache: str
    vllm: str
    source: str


ENGINE_IMAGES: dict[str, EngineRelease] = {
    "lmcache/vllm-openai:v0.3.11": EngineRelease(
        vllm="0.12.0",
        lmcache="0.3.11",
        python="3.12",
        source=(
            "LMCache v0.3.11 .github/workflows/publish.yml (publish-image builds docker/Dockerfile --target "
            "image-release, tagged with `git describe --tags` = v0.3.11, after the PyPI upload) and docker/Dockerfile "
            "image-release (`uv pip install vllm[...]` and `uv pip install lmcache`, both unpinned): built on the "
            "release day, 2025-12-15 (PyPI upload of lmcache 0.3.11), when PyPI's newest vLLM was 0.12.0 (0.13.0 "
            "followed on 2025-12-19); LMCache's compatibility matrix lists vLLM 0.12.0 with LMCache 0.3.11. The tag "
            "can be rebuilt with other contents: pin its digest where a registry is reachable."
        ),
    ),
    "lmcache/vllm-openai:v0.3.7": EngineRelease(
        vllm="0.10.2",
        lmcache="0.3.7",
        python="3.12",
        source="LMCache v0.3.7 docker/Dockerfile image-release and the installation compatibility table (the "
        "project's pin before issue 12; kept so that the mismatch with every router below stays testable).",
    ),
}
"""Engine images the project knows. Another image needs a row here (with its sources) before the schema accepts it."""

ROUTER_IMAGES: dict[str, RouterRelease] = {
    "lmcache/lmstack-router:v0.1.12": RouterRelease(
        production_stack="vllm-stack-0.1.12",
        lmcache="0.3.11",
        vllm="0.13.0",
        source=(
            "production-stack vllm-stack-0.1.12 pyproject.toml (extra `lmcache`: lmcache==0.3.11, vllm==0.13.0), "
            "docker/Dockerfile (installs `.[semantic_cache,lmcache]`) and .github/workflows/scheduled-release.yml "
            "(pushes lmcache/lmstack-router:v<version> for each release; the unprefixed tag is the setuptools_scm "
            "version, also pushed by router-docker-release.yml for every main commit). Tags 0.1.9 to 0.1.12 all pin "
            "lmcache==0.3.11."
        ),
    ),
}
"""Router images the project knows (stable releases are tagged ``v<chart version>``)."""

DEFAULT_ENGINE_IMAGE = "lmcache/vllm-openai:v0.3.11"
"""The newest engine image whose LMCache matches the newest router release."""
DEFAULT_ROUTER_IMAGE = "lmcache/lmstack-router:v0.1.12"


L2_GUARD_LMCACHE = "0.3.11"
"""The LMCache version the L2 guard (``kvtiers/k8s_charts/kvtiers_l2_guard.py``, ``SUPPORTED_LMCACHE``) is tested
against: engines with an L2 must carry it (the guard refuses to start under another, and without the guard an
unreadable L2 chunk gives wrong output)."""


KVAWARE_FALLBACK_ROUTER = "vllm-stack-0.1.12"
"""The production-stack release whose ``KvawareRouter.route_request`` the kvaware fallback
(``kvtiers/k8s_charts/kvtiers_kvaware_fallback.py``, ``SUPPORTED_ROUTER``) was reviewed and tested against: kvaware
endpoints must use a router image of it (the module refuses to load under other code, and without it a departed
engine's cache match answers HTTP 500)."""


def image_key(image: str) -> str:
    """``repo:tag`` of an image reference, without a ``@sha256:`` digest (the digest pins the contents; the tag
    names the matrix row)."""
    return image.split("@", 1)[0]


def engine_release(image: str) -> EngineRelease | None:
    return ENGINE_IMAGES.get(image_key(image))


def router_release(image: str) -> RouterRelease | None:
    return ROUTER_IMAGES.get(image_key(image))


def lmcache_versions_to_install() -> list[str]:
    """Every LMCache version a contract test runs: the default pair and every known engine (for the mismatch
    tests). ``make`` prints these with ``python kvtiers/catalog/versions.py``."""
    versions = {r.lmcache for r in ENGINE_IMAGES.values()} | {r.lmcache for r in ROUTER_IMAGES.values()}
    return sorted(versions)


if __name__ == "__main__":
    import sys

    # --engine-lmcache / --engine-vllm: what the default engine image carries (the fault drill's venv, the vLLM wheel
    # the contract tests read); default: every LMCache version a contract test installs.
    default_engine = ENGINE_IMAGES[DEFAULT_ENGINE_IMAGE]
    if "--engine-lmcache" in sys.argv:
        print(default_engine.lmcache)
    elif "--engine-vllm" in sys.argv:
        print(default_engine.vllm)
    elif "--router-lmcache" in sys.argv:
        # The LMCache the default router image carries (the router drill's venv).
        print(ROUTER_IMAGES[DEFAULT_ROUTER_IMAGE].lmcache)
    else:
        print(" ".join(lmcache_versions_to_install()))


OPERATOR_ADDON_MODEL_SOURCES: dict[str, tuple[str, ...]] = {
    # The add-on ships operator 3.0 with the CRD of chart 2.0.0 (aws/sagemaker-hyperpod-cli commit 51b8dd2):
    # modelSourceType is s3 or fsx there; huggingface and huggingFaceModel arrived with chart 2.1.1 (4b76719).
    "v1.0.0-eksbuild.1": ("s3", "fsx"),
    # Operator v3.2.0 (the add-on's image as aws/sagemaker-hyperpod-cli#431 reports it): the CRD of chart 2.2.2
    # (a00b22d) also takes huggingface and kubernetesVolume.
    "v1.3.0-eksbuild.1": ("s3", "fsx", "huggingface", "kubernetesVolume"),
}
"""Model sources each pinned Inference Operator add-on version accepts (``spec.modelSourceConfig.modelSourceType``)."""
