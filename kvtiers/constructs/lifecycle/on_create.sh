#!/bin/bash
# HyperPod lifecycle script (kvtiers), the instance groups' OnCreate. Runs on every node HyperPod creates or replaces,
# before the node takes pods, and again when UpdateClusterSoftware gives a node a new root volume. It moves
# containerd's image store and the kubelet directory (emptyDir volumes: the model weights) from the small root disk
# onto the instance group's volume at /opt/sagemaker, as the HyperPod reference lifecycle scripts do, and records where
# the NVMe instance store is mounted (the Curvine worker checks it itself). It gives the same node whether it runs
# before or after nodeadm configures containerd, but refuses to move a kubelet that already runs pods. A re-run on a
# new root starts from the new root only; a re-run on the same root stops and moves nothing. Nothing it adds can hold
# up the node's boot. Any failure fails the node loudly, after a pause that lets the log reach CloudWatch.
#
# KVTIERS_ROOT, KVTIERS_WAIT_SECONDS and KVTIERS_FAIL_PAUSE_SECONDS exist for the offline tests only.
set -Eeuo pipefail
ROOT=${KVTIERS_ROOT:-}
LOG_DIR=$ROOT/var/log/provision
LOG=$LOG_DIR/kvtiers-on-create.log
DISK=/opt/sagemaker
NVME=/opt/dlami/nvme
WAIT_SECONDS=${KVTIERS_WAIT_SECONDS:-60}
FAIL_PAUSE_SECONDS=${KVTIERS_FAIL_PAUSE_SECONDS:-60}
data_root=$DISK/containerd/data-root
# The volume on every boot. HyperPod mounts /opt/sagemaker itself (this script and AWS's reference both wait for it),
# so no fstab entry may need it: a failed fstab mount without nofail fails local-fs.target, whose OnFailure is
# emergency mode, and automatic node recovery then replaces the node and its NVMe cache. Instead containerd and the
# kubelet require a unit of their own (UNIT), which waits for the volume and binds /var/lib/kubelet onto it (HELPER):
# neither starts from the root disk, and the rest of the boot never waits.
HELPER=/usr/local/sbin/kvtiers-node-volume
UNIT=kvtiers-node-volume.service
BOOT_WAIT_SECONDS=600
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

# `wait SECONDS`: until the volume is mounted, or fail. `bind`: the kubelet's directory on the volume, shared
# (CSI drivers mount below it with bidirectional propagation). A bind mount, not AWS's symlink: the kubelet compares
# mount paths without resolving a symlinked root directory everywhere (kubernetes/kubernetes#96888, #96917).
write_helper() {
  mkdir -p "$ROOT${HELPER%/*}"
  cat > "$ROOT$HELPER" <<'HELPER_EOF'
#!/bin/bash
# kvtiers (written by the HyperPod lifecycle script): the instance group's volume for containerd and the kubelet.
set -euo pipefail
root=${KVTIERS_ROOT:-}
case "$1" in
  wait)
    waited=0
    until mountpoint -q "$root/opt/sagemaker"; do
      if (( waited >= $2 )); then
        echo "kvtiers: /opt/sagemaker is not mounted after ${2}s (instance group ebs_volume_gb set?)"
        exit 1
      fi
      sleep 5
      waited=$((waited + 5))
    done
    ;;
  bind)
    if ! mountpoint -q "$root/var/lib/kubelet"; then
      mount --bind "$root/opt/sagemaker/kubelet" "$root/var/lib/kubelet"
      mount --make-rshared "$root/var/lib/kubelet"
    fi
    ;;
esac
HELPER_EOF
  chmod 0755 "$ROOT$HELPER"
}

# No [Install] section: only containerd and the kubelet pull the unit in, so a volume that never comes stops them
# and nothing else. The helper bounds the wait; systemd does not kill it halfway through a bind.
install_units() {
  local service
  printf '%s\n' "[Unit]" "Description=kvtiers: the instance group volume for containerd and the kubelet" \
    "[Service]" "Type=oneshot" "RemainAfterExit=yes" "TimeoutStartSec=infinity" \
    "ExecStart=$HELPER wait $BOOT_WAIT_SECONDS" "ExecStart=$HELPER bind" > "$ROOT/etc/systemd/system/$UNIT"
  for service in containerd kubelet; do
    mkdir -p "$ROOT/etc/systemd/system/$service.service.d"
    printf '[Unit]\nRequires=%s\nAfter=%s\n' "$UNIT" "$UNIT" \
      > "$ROOT/etc/systemd/system/$service.service.d/90-kvtiers-node-volume.conf"
  done
}

# containerd: its data root on the disk. On Amazon Linux 2023 nodeadm (the EKS node bootstrap) writes
# /etc/containerd/config.toml, and may do so before or after this script runs, so the script neither reads nor edits
# that file: it writes a complete configuration of its own on the disk and points containerd at it with a systemd
# drop-in, which nodeadm's later rewrite of /etc/containerd/config.toml does not touch (AWS's reference script,
# awsome-distributed-training 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh,
# does the same since nodeadm was found to overwrite the file).
configure_containerd() {
  mkdir -p "$ROOT$DISK/containerd"
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
}

# The volume's containerd and kubelet directories, if any, are from an earlier root: UpdateClusterSoftware replaces
# the root volume and keeps this one. Merged with the new root's, containerd would read the new meta.db over the old
# snapshots and the kubelet would find old pods and CPU assignments, so they go first, as in AWS's reference.
# --one-file-system: never through a mount below them. Nothing may hold the directories while they move.
move_onto_volume() {
  local service
  for service in "${running[@]}"; do
    systemctl stop "$service"
  done
  rm -rf --one-file-system "$ROOT$data_root" "$ROOT$DISK/kubelet"
  mkdir -p "$ROOT$data_root" "$ROOT$DISK/kubelet"
  if [[ -d "$ROOT/var/lib/containerd" ]]; then
    cp -a "$ROOT/var/lib/containerd/." "$ROOT$data_root/"
  fi
  cp -a "$ROOT/var/lib/kubelet/." "$ROOT$DISK/kubelet/"
}

echo "kvtiers: on_create start"
mkdir -p "$ROOT/etc/systemd/system"
write_helper
"$ROOT$HELPER" wait "$WAIT_SECONDS"
. "$ROOT/etc/os-release"
running=()
for service in kubelet containerd; do
  if systemctl is-active --quiet "$service"; then
    running+=("$service")
  fi
done

# A bound /var/lib/kubelet: this root already runs from the volume. Otherwise a kubelet running pods is left alone:
# binding a copy over its directory would leave the running device plugins watching the old one (no GPUs
# advertised until they restart). AWS's reference stops and restarts nothing, so OnCreate runs before nodeadm starts
# the kubelet (after cloud-init, on the EKS AL2023 AMI); a kubelet with pods means that no longer holds, and the node
# fails loudly instead.
moved=false
if mountpoint -q "$ROOT/var/lib/kubelet"; then
  moved=true
  echo "kvtiers: /var/lib/kubelet is on $DISK already (a re-run on this root): nothing is stopped or moved"
elif [[ " ${running[*]} " == *" kubelet "* ]] && compgen -G "$ROOT/var/lib/kubelet/pods/*" > /dev/null; then
  echo "kvtiers: the kubelet already runs pods from the root disk; OnCreate must run before nodeadm starts it"
  false
fi
configure_containerd
if [[ $moved == false ]]; then
  move_onto_volume
fi
# Earlier kvtiers versions bound the kubelet's directory from /etc/fstab, without nofail.
if [[ -f "$ROOT/etc/fstab" ]]; then
  sed -i "\|^$DISK/kubelet /var/lib/kubelet |d" "$ROOT/etc/fstab"
fi
install_units
systemctl daemon-reload
"$ROOT$HELPER" bind
if [[ $moved == false ]]; then
  for service in containerd kubelet; do
    if [[ " ${running[*]} " == *" $service "* ]]; then
      systemctl start "$service"
    fi
  done
fi

# Where the instance store is: the Curvine worker refuses to start unless its nvme_mount (CurvineSettings) is on it.
echo "kvtiers: mounts of $NVME and $DISK:"
findmnt --target "$ROOT$NVME" || echo "kvtiers: $NVME is not mounted"
findmnt --target "$ROOT$DISK" || true
lsblk -o NAME,MODEL,SIZE,MOUNTPOINTS || true
echo "kvtiers: on_create done"
