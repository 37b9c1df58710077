#!/bin/bash
# HyperPod lifecycle script (kvtiers), the instance groups' OnCreate. Runs on every node HyperPod creates or replaces,
# before the node takes pods, and again when UpdateClusterSoftware gives a node a new root volume. It moves
# containerd's image store and the kubelet directory (emptyDir volumes: the model weights) from the small root disk
# onto the instance group's volume at /opt/sagemaker, as the HyperPod reference lifecycle scripts do, and records where
# the NVMe instance store is mounted (the Curvine worker checks it itself). It gives the same node whether it runs
# before or after nodeadm configures containerd, but refuses to move a kubelet that already runs pods. A re-run on a
# new root starts from the new root only; a re-run on the same root moves nothing. Nothing it adds can fail the
# node's boot: on every boot containerd and the kubelet wait for the volume, however long it takes, and start once it
# is mounted. Any failure fails the node loudly, after a pause that lets the log reach CloudWatch.
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
# neither starts from the root disk, and nothing fails while they wait.
HELPER=/usr/local/sbin/kvtiers-node-volume
UNIT=kvtiers-node-volume.service
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

# `wait DISK [SECONDS]`: until DISK is mounted, saying so every minute in the journal and under /var/log/provision;
# with SECONDS, fail after that long. `bind DISK`: the kubelet's directory on DISK, shared (CSI drivers mount below it
# with bidirectional propagation). A bind mount, not AWS's symlink: the kubelet compares mount paths without resolving
# a symlinked root directory everywhere (kubernetes/kubernetes#96888, #96917). nodeadm writes the kubelet's kubeconfig
# (or, on Outposts, its bootstrap kubeconfig) under /var/lib/kubelet on every boot before cloud-init, which can be
# before the bind: the bind carries this boot's copy onto DISK first.
write_helper() {
  mkdir -p "$ROOT${HELPER%/*}"
  cat > "$ROOT$HELPER" <<'HELPER_EOF'
#!/bin/bash
# kvtiers (written by the HyperPod lifecycle script): the instance group's volume for containerd and the kubelet.
set -euo pipefail
root=${KVTIERS_ROOT:-}
disk=$2
say() {
  echo "$1"
  mkdir -p "$root/var/log/provision"
  echo "$(date -u +%FT%TZ) $1" >> "$root/var/log/provision/kvtiers-node-volume.log"
}
case "$1" in
  wait)
    waited=0
    until mountpoint -q "$root$disk"; do
      if [[ -n ${3:-} ]] && (( waited >= $3 )); then
        say "kvtiers: $disk is not mounted after ${waited}s (instance group ebs_volume_gb set?)"
        exit 1
      fi
      if (( waited % 60 == 0 )); then
        say "kvtiers: $disk is not mounted yet (${waited}s); containerd and the kubelet wait for it"
      fi
      sleep 5
      waited=$((waited + 5))
    done
    ;;
  bind)
    mkdir -p "$root/var/lib/kubelet" "$root$disk/kubelet"
    if ! mountpoint -q "$root/var/lib/kubelet"; then
      for file in kubeconfig bootstrap-kubeconfig; do
        if [[ -f "$root/var/lib/kubelet/$file" ]]; then
          cp -p "$root/var/lib/kubelet/$file" "$root$disk/kubelet/$file"
        fi
      done
      mount --bind "$root$disk/kubelet" "$root/var/lib/kubelet"
      mount --make-rshared "$root/var/lib/kubelet"
    fi
    ;;
esac
HELPER_EOF
  chmod 0755 "$ROOT$HELPER"
}

# No [Install] section: only the starts of containerd and the kubelet pull the unit in. Its wait has no bound, and
# systemd none either (TimeoutStartSec): nodeadm-run restarts containerd and then the kubelet on every boot and polls
# until each is active, without limit, and nothing starts a service again whose required unit failed; a bound would
# only turn a late volume into a node without containerd until the next reboot. While it waits, nodeadm-run and
# multi-user.target wait with it; units not ordered after them run.
install_units() {
  local service
  printf '%s\n' "[Unit]" "Description=kvtiers: the instance group volume for containerd and the kubelet" \
    "[Service]" "Type=oneshot" "RemainAfterExit=yes" "TimeoutStartSec=infinity" \
    "ExecStart=$HELPER wait $DISK" "ExecStart=$HELPER bind $DISK" > "$ROOT/etc/systemd/system/$UNIT"
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
# --one-file-system: never through a mount below them.
move_onto_volume() {
  rm -rf --one-file-system "$ROOT$data_root" "$ROOT$DISK/kubelet"
  mkdir -p "$ROOT$data_root" "$ROOT$DISK/kubelet" "$ROOT/var/lib/kubelet"
  if [[ -d "$ROOT/var/lib/containerd" ]]; then
    cp -a "$ROOT/var/lib/containerd/." "$ROOT$data_root/"
  fi
  cp -a "$ROOT/var/lib/kubelet/." "$ROOT$DISK/kubelet/"
}

echo "kvtiers: on_create start"
mkdir -p "$ROOT/etc/systemd/system"
write_helper
"$ROOT$HELPER" wait "$DISK" "$WAIT_SECONDS"
. "$ROOT/etc/os-release"
# Running is anything systemd does not report inactive or failed: a kubelet between two restarts is "activating".
running=()
for service in kubelet containerd; do
  state=$(systemctl is-active "$service" || true)
  if [[ $state != inactive && $state != failed ]]; then
    running+=("$service")
  fi
done

# This root has been moved onto the volume before if it holds the unit (installed once the move is done) or, from
# kvtiers versions before the unit, the fstab line (written once the copy was done). Both are files on the root disk,
# so they still say so after a boot that left /var/lib/kubelet unbound; a new root (UpdateClusterSoftware) has neither.
same_root=false
if [[ -f "$ROOT/etc/systemd/system/$UNIT" ]] || grep -qs "^$DISK/kubelet /var/lib/kubelet " "$ROOT/etc/fstab"; then
  same_root=true
fi
bound=false
if mountpoint -q "$ROOT/var/lib/kubelet"; then
  bound=true
fi
# A kubelet running pods from the root disk is left alone: binding a copy over its directory would leave the running
# device plugins watching the old one (no GPUs advertised until they restart). AWS's reference stops and restarts
# nothing, so OnCreate runs before nodeadm starts the kubelet (after cloud-init, on the EKS AL2023 AMI); a kubelet
# with pods means that no longer holds, and the node fails loudly instead.
if [[ $bound == false && " ${running[*]} " == *" kubelet "* ]] \
  && compgen -G "$ROOT/var/lib/kubelet/pods/*" > /dev/null; then
  echo "kvtiers: the kubelet already runs pods from the root disk; OnCreate must run before nodeadm starts it"
  false
fi
# Someone else's mount on a new root (the EKS AMI's setup-local-disks, for one, binds it onto the instance stores).
if [[ $bound == true && $same_root == false ]]; then
  echo "kvtiers: /var/lib/kubelet is already a mount that this script did not make; refusing to move it"
  false
fi
configure_containerd
# Nothing may hold the kubelet's directory while it is copied or bound over.
if [[ $bound == false ]]; then
  for service in "${running[@]}"; do
    systemctl stop "$service"
  done
fi
if [[ $same_root == true ]]; then
  echo "kvtiers: a re-run on this root: the containerd data root and kubelet directory on $DISK stay as they are"
else
  move_onto_volume
fi
# Earlier kvtiers versions bound the kubelet's directory from /etc/fstab, without nofail.
if [[ -f "$ROOT/etc/fstab" ]]; then
  sed -i "\|^$DISK/kubelet /var/lib/kubelet |d" "$ROOT/etc/fstab"
fi
install_units
systemctl daemon-reload
"$ROOT$HELPER" bind "$DISK"
if [[ $bound == false ]]; then
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
