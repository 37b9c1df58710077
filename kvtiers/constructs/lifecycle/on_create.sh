#!/bin/bash
# HyperPod lifecycle script (kvtiers). Runs once on every node HyperPod creates or replaces, before the node takes
# pods. It moves containerd's image store and the kubelet directory (emptyDir volumes: the model weights) from the
# small root disk onto the instance group's volume at /opt/sagemaker, as the HyperPod reference lifecycle scripts
# do, and records where the NVMe instance store is mounted (the Curvine worker checks it itself).
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

# containerd: keep the AMI's own configuration (NVIDIA runtime, sandbox image) and change only its data root.
data_root=$DISK/containerd/data-root
mkdir -p "$ROOT$data_root"
case "${ID:-}:${VERSION_ID:-}" in
  amzn:2023)
    # A copy on the disk plus a drop-in, so a regenerated /etc/containerd/config.toml does not undo it.
    ami_config=$ROOT/etc/containerd/config.toml
    [[ -f "$ami_config" ]] || { echo "kvtiers: $ami_config is missing; is this the HyperPod EKS AMI?"; false; }
    config=$DISK/containerd/config.toml
    if grep -q '^root *=' "$ami_config"; then
      sed "s|^root *=.*|root = \"$data_root\"|" "$ami_config" > "$ROOT$config"
    else
      { echo "root = \"$data_root\""; cat "$ami_config"; } > "$ROOT$config"
    fi
    mkdir -p "$ROOT/etc/systemd/system/containerd.service.d"
    printf '[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config %s\n' "$config" \
      > "$ROOT/etc/systemd/system/containerd.service.d/50-kvtiers-data-root.conf"
    ;;
  amzn:2)
    ami_config=$ROOT/etc/eks/containerd/containerd-config.toml
    [[ -f "$ami_config" ]] || { echo "kvtiers: $ami_config is missing; is this the HyperPod EKS AMI?"; false; }
    sed -i "s|^root *=.*|root = \"$data_root\"|" "$ami_config"
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

# Where the instance store is: the Curvine worker refuses to start unless curvine.worker.nvme_mount is on it.
echo "kvtiers: mounts of $NVME and $DISK:"
findmnt --target "$ROOT$NVME" || echo "kvtiers: $NVME is not mounted"
findmnt --target "$ROOT$DISK" || true
lsblk -o NAME,MODEL,SIZE,MOUNTPOINTS || true
echo "kvtiers: on_create done"
