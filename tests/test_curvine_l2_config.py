"""Bad Curvine settings are refused, by the file's schema (its own fields) or by the construct they map onto (with
the construct's message, the same a library user gets)."""

from __future__ import annotations

import pytest

from tests.test_config import rejected, set_path

CASES = [
    ("curvine.master.replicas", 2, "CurvineJournalVolumes: masters must be one of 1, 3, 5, got 2"),
    ("curvine.master.replicas", 4, "CurvineJournalVolumes: masters must be one of 1, 3, 5, got 4"),
    (
        "curvine.worker.data_dir",
        "opt/dlami/nvme/curvine",
        "CurvineSettings: data_dir 'opt/dlami/nvme/curvine' is not an",
    ),
    ("curvine.worker.data_dir", "", "CurvineSettings: data_dir '' is not an absolute path"),
    ("curvine.images.runtime_image", "ghcr.io/curvineio/curvine:latest", "CurvineImages: runtime_image"),
    ("curvine.images.csi_image", "ghcr.io/curvineio/curvine-csi", "CurvineImages: csi_image"),
    ("curvine.fs_path", "l2cache", "should match pattern"),
    ("serving.l2_mount_path", "mnt/curvine", "should match pattern"),
    ("curvine.eviction.low_watermark", 0.9, "CurvineEviction: low_watermark 0.9 must be below high_watermark"),
]


@pytest.mark.parametrize(("field", "value", "expected"), CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_bad_curvine_settings(tmp_path, field, value, expected):
    def change(raw):
        raw.setdefault("curvine", {}).setdefault("images", {})
        raw["curvine"].setdefault("eviction", {})
        set_path(raw, field, value)

    message = rejected(tmp_path, change)
    assert expected in message, message
    if "invalid environment" in message:
        assert field.rsplit(".", 1)[0] in message, message
