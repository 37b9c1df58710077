#!/bin/bash
# HyperPod lifecycle script (kvtiers), the instance groups' OnCreate. Runs once on every node HyperPod creates or
# replaces, before the node takes pods. It moves containerd's image store and the kubelet directory (emptyDir
# volumes: the model weights) from the small root disk onto the instance group's volume at /opt/sagemaker, as the
# HyperPod reference lifecycle scripts do, and records where the NVMe instance store is mounted (the Curvine worker
# checks it itself). It gives the same node whether it runs before or after nodeadm configures containerd.
# Any failure fails the node loudly, after a pause that lets the log reach CloudWatch.
#
# KVTIERS_ROOT, KVTIERS_WAIT_SECONDS and KVTIERS_FAIL_PAUSE_SECONDS exist for the offline tests only.
set -euo pipefail
ROOT=${KVTIERS_ROOT:-}
LOG_DIR=$ROOT/var/log/provision
LOG=$LOG_DIR/kvtiers-on-create.log
DISK=/opt/sagemaker
NVME=/opt/dlami/nvme
WAIT_SECONDS=${KVTIERS_WAIT_SECONDS:-60}
FAIL_PAUSE_SECONDS=${KVTIERS_FAIL_PAUSE_SECONDS:-60}
mkdir -p "$LOG_DIR"
exec > >(tee -a "$LOG") 2>&1

on_failure() {
  local status=$?
  echo "kvtiers: on_create failed (exit $status) at line $1; pausing ${FAIL_PAUSE_SECONDS}s so the log is uploaded"
  sync
  sleep "$FAIL_PAUSE_SECONDS"
  exit 1
}
trap 'on_failure $LINENO' ERR

echo "kvtiers: on_create start"
waited=0
until mountpoint -q "$ROOT$DISK"; do
  if (( waited >= WAIT_SECONDS )); then
    echo "kvtiers: $DISK is not mounted after ${WAIT_SECONDS}s (instance group ebs_volume_gb set?)"
    false
  fi
  sleep 5
  waited=$((waited + 5))
done

. "$ROOT/etc/os-release"
# Nothing may hold the old directories while they move: stop the kubelet and containerd if they already run.
running=()
for service in kubelet containerd; do
  if systemctl is-active --quiet "$service"; then
    running+=("$service")
    systemctl stop "$service"
  fi
done

# containerd: its data root on the disk. On Amazon Linux 2023 nodeadm (the EKS node bootstrap) writes
# /etc/containerd/config.toml, and may do so before or after this script runs, so the script neither reads nor edits
# that file: it writes a complete configuration of its own on the disk and points containerd at it with a systemd
# drop-in, which nodeadm's later rewrite of /etc/containerd/config.toml does not touch (AWS's reference script,
# awsome-distributed-training 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh,
# does the same since nodeadm was found to overwrite the file).
data_root=$DISK/containerd/data-root
mkdir -p "$ROOT$data_root"
case "${ID:-}:${VERSION_ID:-}" in
  amzn:2023)
    config=$DISK/containerd/config.toml
    # GPU nodes run containers through the NVIDIA runtime (device injection); without it on the node, runc.
    runtime=runc
    if [[ -x "$ROOT/usr/bin/nvidia-container-runtime" ]]; then
      runtime=nvidia
    fi
    # The node's base OCI spec (the AMI's default rlimits), as nodeadm's own configuration and AWS's reference use
    # it. nodeadm writes it before it starts containerd (awslabs/amazon-eks-ami nodeadm/internal/containerd,
    # writeBaseRuntimeSpec), so it is named when it exists or while containerd has not started (this script before
    # nodeadm); never as a missing file for a running containerd, whose CRI plugin would fail to load it.
    base_spec=/etc/containerd/base-runtime-spec.json
    base_spec_line=
    if [[ -f "$ROOT$base_spec" || " ${running[*]} " != *" containerd "* ]]; then
      base_spec_line="base_runtime_spec = \"$base_spec\""
    fi
    cat > "$ROOT$config" <<EOF
version = 2
root = "$data_root"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
# The EKS AL2023 node image ships the pause image under this local name (no registry pull at pod start).
sandbox_image = "localhost/kubernetes/pause"
enable_cdi = true

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "$runtime"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
$base_spec_line

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
$base_spec_line

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
EOF
    # Last in lexical order, so that it decides ExecStart whatever drop-ins nodeadm or the AMI add.
    mkdir -p "$ROOT/etc/systemd/system/containerd.service.d"
    printf '[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config %s\n' "$config" \
      > "$ROOT/etc/systemd/system/containerd.service.d/99-kvtiers-data-root.conf"
    ;;
  amzn:2)
    # Amazon Linux 2 bootstraps with /etc/eks/bootstrap.sh, which reads this file; a missing one is only logged.
    ami_config=$ROOT/etc/eks/containerd/containerd-config.toml
    if [[ -f "$ami_config" ]]; then
      sed -i "s|^[# ]*root *=.*|root = \"$data_root\"|" "$ami_config"
    else
      echo "kvtiers: $ami_config not found; containerd keeps its data under /var/lib/containerd"
    fi
    ;;
  *)
    echo "kvtiers: expected the Amazon Linux HyperPod EKS AMI, found ${PRETTY_NAME:-unknown}"
    false
    ;;
esac
if [[ -d "$ROOT/var/lib/containerd" ]]; then
  cp -a "$ROOT/var/lib/containerd/." "$ROOT$data_root/"
fi
systemctl daemon-reload

# kubelet: pod volumes (the model weights' emptyDir) land on the disk, not the root volume. A bind mount, not a
# symlink: CSI drivers mount below /var/lib/kubelet with bidirectional propagation and expect a real mount there.
if ! mountpoint -q "$ROOT/var/lib/kubelet"; then
  mkdir -p "$ROOT$DISK/kubelet" "$ROOT/var/lib/kubelet"
  cp -a "$ROOT/var/lib/kubelet/." "$ROOT$DISK/kubelet/"
  echo "$DISK/kubelet /var/lib/kubelet none bind,x-systemd.requires-mounts-for=$DISK 0 0" >> "$ROOT/etc/fstab"
  mount --bind "$ROOT$DISK/kubelet" "$ROOT/var/lib/kubelet"
  mount --make-rshared "$ROOT/var/lib/kubelet"
fi
for service in containerd kubelet; do
  if [[ " ${running[*]} " == *" $service "* ]]; then
    systemctl start "$service"
  fi
done

# Where the instance store is: the Curvine worker refuses to start unless its nvme_mount (CurvineSettings) is on it.
echo "kvtiers: mounts of $NVME and $DISK:"
findmnt --target "$ROOT$NVME" || echo "kvtiers: $NVME is not mounted"
findmnt --target "$ROOT$DISK" || true
lsblk -o NAME,MODEL,SIZE,MOUNTPOINTS || true
echo "kvtiers: on_create done"
