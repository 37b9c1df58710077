"""Security contexts shared by the charts. Each workload takes the tightest one its image allows; where a workload
needs less, the chart that renders it says why next to the exception."""

from __future__ import annotations

NON_ROOT_UID = 65532
"""UID/GID for images that run any user: none of them defines one (no ``USER`` in their Dockerfiles), and a UID
above 10000 does not collide with a host user."""
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def container_context(*, root: bool = False, read_only_root: bool = True) -> dict:
    """No privilege escalation, every capability dropped, the runtime's seccomp profile, a read-only root
    filesystem (writable paths are explicit volumes) and, unless ``root``, a non-root user."""
    context: dict = {
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


def pod_context(*, root: bool = False, fs_group: bool = False) -> dict:
    """Pod-level defaults matching :func:`container_context`; ``fs_group`` makes volumes that support ownership
    management (EBS, emptyDir) writable by the non-root group."""
    context: dict = {"seccompProfile": dict(RUNTIME_DEFAULT)}
    if not root:
        context.update(runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID)
    if fs_group:
        context.update(fsGroup=NON_ROOT_UID, fsGroupChangePolicy="OnRootMismatch")
    return context
