"""Bad Curvine settings are rejected by the schema with the field named."""

from __future__ import annotations

import pytest

from tests.test_config import rejected, set_path

CASES = [
    ("curvine.master.replicas", 2, "master replicas must be 1, 3 or 5"),
    ("curvine.master.replicas", 4, "master replicas must be 1, 3 or 5"),
    ("curvine.worker.data_dir", "opt/dlami/nvme/curvine", "data_dir must be an absolute path"),
    ("curvine.worker.data_dir", "", "data_dir must be an absolute path"),
    ("curvine.images.runtime_image", "ghcr.io/curvineio/curvine:latest", "moving tag 'latest'"),
    ("curvine.images.csi_image", "ghcr.io/curvineio/curvine-csi", "has no tag"),
    ("curvine.fs_path", "l2cache", "should match pattern"),
    ("serving.l2_mount_path", "mnt/curvine", "should match pattern"),
    ("curvine.eviction.low_watermark", 0.9, "must be below high_watermark"),
]


@pytest.mark.parametrize(("field", "value", "expected"), CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_bad_curvine_settings(tmp_path, field, value, expected):
    def change(raw):
        raw.setdefault("curvine", {}).setdefault("images", {})
        raw["curvine"].setdefault("eviction", {})
        set_path(raw, field, value)

    message = rejected(tmp_path, change)
    assert expected in message, message
    section = field.rsplit(".", 1)[0]
    assert section in message, message
