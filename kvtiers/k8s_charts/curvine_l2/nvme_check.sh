#!/bin/bash
# Curvine worker start check (kvtiers): the cache directory must be on the node's NVMe instance store, never on the
# root disk or an EBS volume. A hostPath volume of type Directory passes when the NVMe is not mounted (it is then a
# plain directory of the root filesystem), so this reads the mount table instead and fails the pod visibly.
#
# Environment: TARGET (where the host path is mounted in this container), HOST_PATH (the node's path, for the
# messages), EXPECTED_MODEL (the block-device model of the instance store); MOUNTINFO and SYSFS for tests.
# Bash builtins only: the check runs in the Curvine runtime image.
set -u
TARGET=${TARGET:?}
HOST_PATH=${HOST_PATH:-$TARGET}
EXPECTED_MODEL=${EXPECTED_MODEL:-Amazon EC2 NVMe Instance Storage}
MOUNTINFO=${MOUNTINFO:-/proc/self/mountinfo}
SYSFS=${SYSFS:-/sys}

fail() {
  echo "kvtiers: curvine worker refuses to start: $*" >&2
  exit 1
}

entry=""
while IFS= read -r line; do
  read -r -a fields <<<"$line"
  if [[ "${fields[4]}" == "$TARGET" ]]; then entry="$line"; fi
done <"$MOUNTINFO"
[[ -n "$entry" ]] || fail "$TARGET is not mounted in this container (hostPath $HOST_PATH missing?)"

read -r -a fields <<<"$entry"
devno=${fields[2]}
root=${fields[3]}
source_device=${entry#* - }
read -r fstype source_device _ <<<"$source_device"
if [[ "$root" != "/" ]]; then
  fail "$HOST_PATH is not a mount point: it is the directory $root of the $fstype filesystem on $source_device," \
    "so the cache would fill that disk. Mount the instance store there (see the lifecycle script log" \
    "/var/log/provision/kvtiers-on-create.log) or set the Curvine worker's nvme_mount (CurvineSettings) to where it is mounted."
fi

# The disks behind the filesystem: itself, or the members of a device-mapper (LVM) volume; partitions map to their disk.
disks=()
block="$SYSFS/dev/block/$devno"
[[ -e "$block" ]] || fail "no block device $devno in $SYSFS for $source_device"
members=("$block"/slaves/*)
if [[ -e "${members[0]}" ]]; then
  for member in "${members[@]}"; do disks+=("${member##*/}"); done
else
  disks+=("$(cd -P "$block" && echo "${PWD##*/}")")
fi
others=()
described=()
for disk in "${disks[@]}"; do
  if [[ -e "$SYSFS/class/block/$disk/partition" ]]; then
    disk=$(cd -P "$SYSFS/class/block/$disk/.." && echo "${PWD##*/}")
  fi
  model=""
  [[ -r "$SYSFS/class/block/$disk/device/model" ]] && read -r model <"$SYSFS/class/block/$disk/device/model"
  described+=("$disk ($model)")
  [[ "$model" == *"$EXPECTED_MODEL"* ]] || others+=("$disk")
done
# Every member: a volume that also spans an EBS disk would put part of the cache on it.
[[ ${#others[@]} -eq 0 ]] || fail "$HOST_PATH is the $fstype filesystem on $source_device, backed by ${described[*]}:" \
  "${others[*]} is not the instance store ($EXPECTED_MODEL). If the AMI joins the instance store and the" \
  "secondary EBS volume at /opt/sagemaker, set the instance group's ebs_volume_gb to 0."
echo "kvtiers: $HOST_PATH is the $fstype filesystem on $source_device, backed by ${described[*]}"
