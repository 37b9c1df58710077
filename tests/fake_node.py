"""A HyperPod node in a directory, for running the lifecycle script with bash. System commands are stubs on PATH
that record their calls; ``systemctl`` keeps each service's state in a state file (``is-active`` prints it and
succeeds only for ``active``, as systemctl does), ``mount --bind`` records its source and target and ``mountpoint``
answers from the fake root and those records. Also what nodeadm (the Amazon Linux 2023 EKS bootstrap) does to the
node, and a reboot."""

from __future__ import annotations

import shutil
import subprocess
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

from kvtiers.constructs.hyperpod_cluster import LIFECYCLE_DIR, ON_CREATE
from tests.waiting import HANG_BOUND_SECONDS, until

SCRIPT = LIFECYCLE_DIR / ON_CREATE
NODEADM_CONFIG = 'version = 2\nroot = "/var/lib/containerd"\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
"""What nodeadm leaves in /etc/containerd/config.toml: the default data root."""
DATA_ROOT = "/opt/sagemaker/containerd/data-root"
DISK = "/opt/sagemaker"


def make_node(tmp_path: Path):
    root = tmp_path / "root"
    install_ami(root)
    (root / "opt" / "sagemaker").mkdir(parents=True)
    (root / "opt" / "dlami" / "nvme").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    running = tmp_path / "running"
    running.write_text("")
    mounts = tmp_path / "mounts"
    mounts.write_text("")
    binds = tmp_path / "binds"
    binds.write_text("")
    for name in ("findmnt", "lsblk"):
        stub(bin_dir / name, f'echo "{name} $*" >> {calls}\n')
    stub(
        bin_dir / "mount",
        f"""echo "mount $*" >> {calls}
if [[ $1 == --bind ]]; then echo "$3" >> {mounts}; echo "$2 $3" >> {binds}; fi
""",
    )
    stub(
        bin_dir / "systemctl",
        f"""echo "systemctl $*" >> {calls}
case "$1" in
  is-active)
    state=$(awk -v unit="${{@: -1}}" '$1 == unit {{ print ($2 == "" ? "active" : $2) }}' {running})
    state=${{state:-inactive}}
    [[ $2 == --quiet ]] || echo "$state"
    [[ $state == active ]] ;;
  stop) awk -v unit="$2" '$1 != unit' {running} > {running}.new; mv {running}.new {running} ;;
  start) echo "$2" >> {running} ;;
esac
""",
    )
    stub(bin_dir / "mountpoint", f'[[ -e "${{@: -1}}/.mounted" ]] || grep -qx -- "${{@: -1}}" {mounts}\n')
    # The volume that appears late: it is mounted while whoever waits for it sleeps for the n-th time.
    late = tmp_path / "volume-appears-after-sleeps"
    stub(
        bin_dir / "sleep",
        f"""echo "sleep $*" >> {calls}
if [[ -f {late} ]]; then
  read -r left disk < {late}
  left=$((left - 1))
  echo "$left $disk" > {late}
  if (( left == 0 )); then touch "{root}$disk/.mounted"; echo "volume mounted" >> {calls}; fi
fi
""",
    )
    return root, bin_dir, calls, running


def stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def install_ami(root: Path) -> None:
    """What a fresh root volume of the HyperPod AMI holds for the script."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('ID="amzn"\nVERSION_ID="2023"\nPRETTY_NAME="Amazon Linux 2023"\n')
    (root / "usr" / "bin").mkdir(parents=True)
    runtime = root / "usr" / "bin" / "nvidia-container-runtime"
    runtime.write_text("#!/bin/sh\n")
    runtime.chmod(0o755)
    (root / "var" / "lib" / "kubelet" / "pki").mkdir(parents=True)
    (root / "var" / "lib" / "kubelet" / "pki" / "kubelet.crt").write_text("cert")


def run(node, *, script: Path = SCRIPT, **env) -> subprocess.CompletedProcess:
    root, bin_dir, _, _ = node
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KVTIERS_ROOT": str(root),
        "KVTIERS_WAIT_SECONDS": "0",
        "KVTIERS_FAIL_PAUSE_SECONDS": "0",
        **env,
    }
    return subprocess.run(
        ["bash", str(script)], env=environment, capture_output=True, text=True, timeout=HANG_BOUND_SECONDS
    )


BASE_RUNTIME_SPEC = "/etc/containerd/base-runtime-spec.json"
"""Where nodeadm writes the node's base OCI spec (its default rlimits) before it starts containerd (awslabs/amazon-eks-ami
nodeadm/internal/containerd ``writeBaseRuntimeSpec``, unconditional); its own containerd configuration points there."""


def nodeadm(node, *, base_runtime_spec: bool = True) -> None:
    """What nodeadm does to containerd: write its configuration file and (unless an image without it is modelled)
    the base runtime spec, add its own drop-in, start containerd (with the content of /var/lib/containerd it
    creates)."""
    root, _, _, running = node
    (root / "etc" / "containerd").mkdir(parents=True, exist_ok=True)
    if base_runtime_spec:
        (root / BASE_RUNTIME_SPEC.lstrip("/")).write_text('{"ociVersion": "1.1.0", "process": {"rlimits": []}}')
    (root / "etc" / "containerd" / "config.toml").write_text(NODEADM_CONFIG)
    dropins = root / "etc" / "systemd" / "system" / "containerd.service.d"
    dropins.mkdir(parents=True, exist_ok=True)
    (dropins / "10-nodeadm.conf").write_text("[Service]\nExecStart=\nExecStart=/usr/bin/containerd\n")
    (root / "var" / "lib" / "containerd" / "io.containerd.content.v1.content").mkdir(parents=True, exist_ok=True)
    if "containerd" not in running.read_text().split():
        running.write_text(running.read_text() + "containerd\n")


def effective_containerd_config(root: Path) -> dict:
    """The configuration containerd starts with: the last ExecStart of its drop-ins in systemd's (lexical) order,
    ``--config`` or containerd's default path, read from the fake root."""
    exec_start = "/usr/bin/containerd"
    dropins = root / "etc" / "systemd" / "system" / "containerd.service.d"
    for dropin in sorted(dropins.glob("*.conf")) if dropins.is_dir() else ():
        exec_start = ([exec_start] + [v for v in unit_values(dropin.read_text(), "Service", "ExecStart") if v])[-1]
    args = exec_start.split()
    path = args[args.index("--config") + 1] if "--config" in args else "/etc/containerd/config.toml"
    return tomllib.loads((root / path.lstrip("/")).read_text())


def mounted(node, disk: str = DISK) -> None:
    (node[0] / disk.lstrip("/") / ".mounted").write_text("")


def volume_appears(node, *, after_sleeps: int, disk: str = DISK) -> None:
    """The volume is mounted while whoever waits for it sleeps for the ``after_sleeps``-th time (5 s each)."""
    (node[0].parent / "volume-appears-after-sleeps").write_text(f"{after_sleeps} {disk}")


def node_path(node, path: str) -> Path:
    """Where ``path`` (a path on the node) is in the fake root, through the bind mounts made since the last boot."""
    root = node[0]
    for line in reversed((root.parent / "binds").read_text().splitlines()):
        source, target = line.split(" ", 1)
        prefix = target.removeprefix(str(root))
        if path == prefix or path.startswith(prefix + "/"):
            return Path(source) / path.removeprefix(prefix).lstrip("/")
    return root / path.lstrip("/")


def bound(node, path: str) -> bool:
    """Whether ``mount --bind`` has mounted something on ``path`` (a path on the node) since the last boot."""
    root = node[0]
    return f"{root}{path}" in (root.parent / "mounts").read_text().split("\n")


def kubelet_runs_pods(node, pods_dir: str = "/var/lib/kubelet/pods") -> None:
    """nodeadm has started the kubelet and it runs pods (the DaemonSets: device plugins, CNI) from ``pods_dir``."""
    root, _, _, running = node
    (root / pods_dir.lstrip("/") / "0b5e-device-plugin" / "volumes").mkdir(parents=True)
    running.write_text(running.read_text() + "kubelet\n")


def replace_root_volume(node) -> None:
    """What UpdateClusterSoftware does before it re-runs the lifecycle scripts: a new root volume from the AMI; the
    instance group's volume at /opt/sagemaker keeps its files; nothing is mounted or running."""
    root = node[0]
    for child in root.iterdir():
        if child.name != "opt":
            shutil.rmtree(child)
    install_ami(root)
    _forget_boot(node)


def _forget_boot(node) -> None:
    root, _, _, running = node
    running.write_text("")
    for records in ("mounts", "binds"):
        (root.parent / records).write_text("")
    for marker in (root / "opt").rglob(".mounted"):
        marker.unlink()


def boot_blocking_mounts(root: Path, out: Path) -> list[str]:
    """The mount units local-fs.target requires after a reboot: if one fails, local-fs.target fails and systemd
    enters emergency mode (systemd 252 ``units/local-fs.target``: ``OnFailure=emergency.target``). Computed by
    systemd's own fstab generator from the node's /etc/fstab (``SYSTEMD_FSTAB``); an entry with ``nofail`` is only
    wanted (systemd.mount(5))."""
    fstab = root / "etc" / "fstab"
    if not fstab.exists():
        return []
    for directory in ("normal", "early", "late"):
        (out / directory).mkdir(parents=True)
    subprocess.run(
        [FSTAB_GENERATOR, str(out / "normal"), str(out / "early"), str(out / "late")],
        env={"SYSTEMD_FSTAB": str(fstab), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=HANG_BOUND_SECONDS,
    )
    required = out / "normal" / "local-fs.target.requires"
    return sorted(p.name for p in required.iterdir()) if required.is_dir() else []


FSTAB_GENERATOR = "/usr/lib/systemd/system-generators/systemd-fstab-generator"


def unit_values(text: str, section: str, key: str) -> list[str]:
    """Every value of ``key`` in ``section`` of a systemd unit or drop-in, in order (systemd keeps repeated keys)."""
    values, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line.startswith(f"{key}="):
            values.append(line.split("=", 1)[1])
    return values


def start_service(node, service: str, *, on_spawn: Callable[[subprocess.Popen], None] = lambda _: None) -> bool:
    """``systemctl start <service>`` as systemd does it: first each unit the service's drop-ins require (its
    ExecStart commands in order, run from the fake root, their output in the journal); if one fails, the service is
    not started. ``on_spawn`` gets each command's process (``stop_volume_unit`` ends one)."""
    root, bin_dir, calls, running = node
    dropins = root / "etc" / "systemd" / "system" / f"{service}.service.d"
    required = [
        unit
        for dropin in sorted(dropins.glob("*.conf"))
        if dropins.is_dir()
        for value in unit_values(dropin.read_text(), "Unit", "Requires")
        for unit in value.split()
    ]
    for unit in required:
        text = (root / "etc" / "systemd" / "system" / unit).read_text()
        for command in unit_values(text, "Service", "ExecStart"):
            argv = command.split()
            with journal(node).open("a") as out:
                process = subprocess.Popen(
                    [f"{root}{argv[0]}", *argv[1:]],
                    env={"PATH": f"{bin_dir}:/usr/bin:/bin", "KVTIERS_ROOT": str(root)},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            on_spawn(process)
            try:
                returncode = process.wait(timeout=HANG_BOUND_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
            with calls.open("a") as log:
                log.write(f"unit {unit}: {command} -> {returncode}\n")
            if returncode != 0:
                return False
    with calls.open("a") as log:
        log.write(f"started {service}\n")
    running.write_text(running.read_text() + f"{service}\n")
    return True


def journal(node) -> Path:
    """What the units' commands wrote (systemd puts a service's output in the journal)."""
    return node[0].parent / "journal"


KUBECONFIG = "/var/lib/kubelet/kubeconfig"
"""Where nodeadm writes the kubelet's kubeconfig (awslabs/amazon-eks-ami v20260724 nodeadm/internal/kubelet/kubeconfig.go,
``kubeconfigRoot``), in its configure step (``Configure``: kubelet config, kubeconfig, credential provider, CA)."""


def nodeadm_config(node, kubeconfig: str) -> None:
    """nodeadm-config.service: on every boot, before cloud-init (so before OnCreate and before nodeadm-run), nodeadm
    configures the daemons; for the kubelet it writes its kubeconfig under /var/lib/kubelet, through whatever is
    mounted there at the time."""
    path = node_path(node, KUBECONFIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kubeconfig)


class NodeadmRun:
    """nodeadm-run.service on a boot (Type=oneshot, after cloud-final, wanted by multi-user.target: amazon-eks-ami
    v20260724 ``templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service``). Its run phase restarts
    containerd, then the kubelet, through systemd, and after each restart polls until systemd reports the unit active,
    without limit (``nodeadm/internal/daemon/systemd.go`` ``RestartDaemon``, ``waitForStatus`` with
    ``util.WithRetryAlways``), so a restart blocks for as long as a unit the service requires takes to start. A start
    whose required unit failed leaves the service inactive, and nothing starts it again: nodeadm-run would poll
    forever, which the fake records as ``stuck`` instead. The AMI enables no kubelet (its ``install-worker.sh`` enables
    no kubelet.service), so nodeadm-run is what starts it."""

    def __init__(self, node) -> None:
        self.node = node
        self.outcome: dict[str, str] = {}
        self._processes: list[subprocess.Popen] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for service in ("containerd", "kubelet"):
            self.outcome[service] = "restarting"
            if not start_service(self.node, service, on_spawn=self._processes.append):
                self.outcome[service] = "stuck"
                return
            self.outcome[service] = "active"

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop_volume_unit(self) -> None:
        """``systemctl stop kvtiers-node-volume.service`` while it waits: systemd sends SIGTERM to its command."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()

    def power_off(self) -> None:
        """Ends whatever still waits (a test that failed before the volume came)."""
        for process in self._processes:
            if process.poll() is None:
                process.kill()

    def finish(self) -> dict[str, str]:
        until(lambda: not self.running(), what="nodeadm-run ends", seen=lambda: self.outcome)
        return self.outcome


def reboot(node, *, volume_after_sleeps: int | None, disk: str = DISK, kubeconfig: str = "") -> NodeadmRun:
    """A reboot: mounts and services are gone, both volumes keep their files. nodeadm-config writes the kubeconfig
    (``kubeconfig``) under the root disk's /var/lib/kubelet; then nodeadm-run restarts containerd and the kubelet,
    which start as systemd starts them. ``volume_after_sleeps`` is when ``disk`` is mounted: 0 before any service,
    ``n`` while a unit that waits for it sleeps for the n-th time, ``None`` not during this boot."""
    _forget_boot(node)
    if volume_after_sleeps == 0:
        mounted(node, disk)
    elif volume_after_sleeps is not None:
        volume_appears(node, after_sleeps=volume_after_sleeps, disk=disk)
    if kubeconfig:
        nodeadm_config(node, kubeconfig)
    boot = NodeadmRun(node)
    _BOOTS.setdefault(node[0], []).append(boot)
    return boot


_BOOTS: dict[Path, list[NodeadmRun]] = {}


def power_off(node) -> None:
    """Ends every boot of the node that still waits for something."""
    for boot in _BOOTS.pop(node[0], []):
        boot.power_off()
