#!/bin/bash
# HyperPod lifecycle script (kvtiers). Runs once on every node HyperPod creates or replaces, before the node takes
# pods. It moves containerd's image store and the kubelet directory (emptyDir volumes: the model weights) from the
# small root disk onto the instance group's secondary EBS volume at /opt/sagemaker, as the HyperPod reference
# lifecycle scripts do, and records where the NVMe instance store is mounted (the Curvine worker checks it itself).
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
if [[ "${ID:-}" != "amzn" || "${VERSION_ID:-}" != "2023" ]]; then
  echo "kvtiers: expected the Amazon Linux 2023 HyperPod EKS AMI, found ${PRETTY_NAME:-unknown}"
  false
fi

# containerd: keep the AMI's own configuration (NVIDIA runtime, sandbox image) and change only its data root, through
# a copy on the disk and a drop-in, so a regenerated /etc/containerd/config.toml does not undo it.
data_root=$DISK/containerd/data-root
config=$DISK/containerd/config.toml
mkdir -p "$ROOT$data_root"
if grep -q '^root *=' "$ROOT/etc/containerd/config.toml"; then
  sed "s|^root *=.*|root = \"$data_root\"|" "$ROOT/etc/containerd/config.toml" > "$ROOT$config"
else
  { echo "root = \"$data_root\""; cat "$ROOT/etc/containerd/config.toml"; } > "$ROOT$config"
fi
mkdir -p "$ROOT/etc/systemd/system/containerd.service.d"
cat > "$ROOT/etc/systemd/system/containerd.service.d/50-kvtiers-data-root.conf" <<UNIT
[Service]
ExecStart=
ExecStart=/usr/bin/containerd --config $config
UNIT
if [[ -d "$ROOT/var/lib/containerd" ]]; then
  cp -a "$ROOT/var/lib/containerd/." "$ROOT$data_root/"
fi
systemctl daemon-reload
if systemctl is-active --quiet containerd; then
  systemctl restart containerd
fi

# kubelet: pod volumes (the model weights' emptyDir) land on the disk, not the root volume.
if [[ ! -L "$ROOT/var/lib/kubelet" ]]; then
  mkdir -p "$ROOT$DISK/kubelet"
  if [[ -d "$ROOT/var/lib/kubelet" ]]; then
    cp -a "$ROOT/var/lib/kubelet/." "$ROOT$DISK/kubelet/"
    rm -rf "$ROOT/var/lib/kubelet"
  fi
  ln -s "$DISK/kubelet" "$ROOT/var/lib/kubelet"
fi

# Where the instance store is: the Curvine worker refuses to start unless curvine.worker.nvme_mount is on it.
echo "kvtiers: mounts of $NVME and $DISK:"
findmnt --target "$ROOT$NVME" || echo "kvtiers: $NVME is not mounted"
findmnt --target "$ROOT$DISK" || true
lsblk -o NAME,MODEL,SIZE,MOUNTPOINTS || true
echo "kvtiers: on_create done"
