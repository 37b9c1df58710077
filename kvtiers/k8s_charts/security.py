"""Security contexts shared by the charts. Each workload takes the tightest one its image allows; where a workload
needs less, the chart that renders it says why next to the exception."""

from __future__ import annotations

from functools import cache
from typing import Any

from cdk8s_plus_33 import k8s

NON_ROOT_UID = 65532
"""UID/GID for images that run any user: none of them defines one (no ``USER`` in their Dockerfiles), and a UID
above 10000 does not collide with a host user."""
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def container_context(*, root: bool = False, read_only_root: bool = True) -> dict[str, Any]:
    """No privilege escalation, every capability dropped, the runtime's seccomp profile, a read-only root
    filesystem (writable paths are explicit volumes) and, unless ``root``, a non-root user."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
        "seccompProfile": dict(RUNTIME_DEFAULT),
    }
    if root:
        # Root on purpose (the caller says why); without capabilities it cannot bypass file permissions.
        context["runAsUser"] = 0
    else:
        context.update(runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID)
    return context


def pod_context(*, root: bool = False, fs_group: bool = False) -> dict[str, Any]:
    """Pod-level defaults matching :func:`container_context`; ``fs_group`` makes volumes that support ownership
    management (EBS, emptyDir) writable by the non-root group."""
    context: dict[str, Any] = {"seccompProfile": dict(RUNTIME_DEFAULT)}
    if not root:
        context.update(runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID)
    if fs_group:
        context.update(fsGroup=NON_ROOT_UID, fsGroupChangePolicy="OnRootMismatch")
    return context


def container_security_context(*, root: bool = False) -> k8s.SecurityContext:
    """:func:`container_context` as the typed object of cdk8s's Kubernetes classes."""
    context = container_context(root=root)
    return k8s.SecurityContext(
        allow_privilege_escalation=context["allowPrivilegeEscalation"],
        capabilities=k8s.Capabilities(drop=context["capabilities"]["drop"]),
        read_only_root_filesystem=context["readOnlyRootFilesystem"],
        seccomp_profile=k8s.SeccompProfile(type=context["seccompProfile"]["type"]),
        run_as_non_root=context.get("runAsNonRoot"),
        run_as_user=context.get("runAsUser"),
        run_as_group=context.get("runAsGroup"),
    )


def pod_security_context(*, root: bool = False, fs_group: bool = False) -> k8s.PodSecurityContext:
    """:func:`pod_context` as the typed object of cdk8s's Kubernetes classes."""
    context = pod_context(root=root, fs_group=fs_group)
    return k8s.PodSecurityContext(
        seccomp_profile=k8s.SeccompProfile(type=context["seccompProfile"]["type"]),
        run_as_non_root=context.get("runAsNonRoot"),
        run_as_user=context.get("runAsUser"),
        run_as_group=context.get("runAsGroup"),
        fs_group=context.get("fsGroup"),
        fs_group_change_policy=context.get("fsGroupChangePolicy"),
    )


@cache
def quantity(value: str | int) -> k8s.Quantity:
    """A Kubernetes quantity: ``"2Gi"`` as written, an int as a number; one jsii object per distinct value, however
    many containers share it."""
    return k8s.Quantity.from_string(value) if isinstance(value, str) else k8s.Quantity.from_number(value)
