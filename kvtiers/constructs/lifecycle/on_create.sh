#!/bin/bash
# HyperPod lifecycle script (kvtiers). Runs once on every node HyperPod creates or replaces.
# It prepares the node-local NVMe for the Curvine L2 workers; everything else on the node is managed by HyperPod
# and by Kubernetes objects, so the node can be replaced at any time without manual steps.
set -euo pipefail
mkdir -p /var/log/provision
exec > >(tee -a /var/log/provision/kvtiers-on-create.log) 2>&1

NVME_ROOT=/opt/dlami/nvme
if mountpoint -q "$NVME_ROOT"; then
  # The Curvine worker's data_dir lives below this mount (its hostPath volume creates the directory).
  echo "kvtiers: NVMe mounted at $NVME_ROOT"
else
  echo "kvtiers: $NVME_ROOT is not a mount point on this instance type; Curvine workers will not start here" >&2
fi
