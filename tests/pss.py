"""A checker of the Kubernetes Pod Security Standards (baseline and restricted, as the "Pod Security Standards" page
of the Kubernetes documentation defines them) for pod specs the project renders."""

from __future__ import annotations

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
LEVELS = ("privileged", "baseline", "restricted")


def _containers(spec: dict) -> list[dict]:
    return [*spec.get("containers", []), *spec.get("initContainers", []), *spec.get("ephemeralContainers", [])]


def baseline_violations(spec: dict) -> list[str]:
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key}")
    pod_ctx = spec.get("securityContext", {})
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            out.append(f"hostPath volume {v['name']}")
    for s in pod_ctx.get("sysctls", []):
        if s["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {s['name']}")
    contexts = [("pod", pod_ctx)] + [(c["name"], c.get("securityContext", {})) for c in _containers(spec)]
    for name, ctx in contexts:
        if ctx.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"{name}: seccomp Unconfined")
        if ctx.get("appArmorProfile", {}).get("type") == "Unconfined":
            out.append(f"{name}: AppArmor Unconfined")
        se = ctx.get("seLinuxOptions", {})
        if se.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"):
            out.append(f"{name}: SELinux type {se.get('type')}")
        if se.get("user") or se.get("role"):
            out.append(f"{name}: SELinux user/role")
        if ctx.get("windowsOptions", {}).get("hostProcess"):
            out.append(f"{name}: hostProcess")
    for c in _containers(spec):
        ctx = c.get("securityContext", {})
        if ctx.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set(ctx.get("capabilities", {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            out.append(f"{c['name']}: adds capabilities {sorted(added - BASELINE_CAPABILITIES)}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
        if ctx.get("procMount") not in (None, "Default"):
            out.append(f"{c['name']}: procMount")
    return out


def restricted_violations(spec: dict) -> list[str]:
    out = baseline_violations(spec)
    pod_ctx = spec.get("securityContext", {})
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']} of type {sorted(kinds)}")
    if pod_ctx.get("runAsUser") == 0:
        out.append("pod: runAsUser 0")
    pod_seccomp = pod_ctx.get("seccompProfile", {}).get("type")
    for c in _containers(spec):
        ctx = c.get("securityContext", {})
        name = c["name"]
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{name}: runAsNonRoot not true")
        if ctx.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = ctx.get("seccompProfile", {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccomp profile not set")
        caps = ctx.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: capabilities not dropped")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities beyond NET_BIND_SERVICE")
    return out


def level(spec: dict) -> str:
    """The strictest level the pod spec meets."""
    if restricted_violations(spec):
        return "baseline" if not baseline_violations(spec) else "privileged"
    return "restricted"


def meets(spec: dict, required: str) -> bool:
    return LEVELS.index(level(spec)) >= LEVELS.index(required)
