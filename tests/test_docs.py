"""Generated documentation is current."""

from __future__ import annotations

import subprocess
import sys

from tests.synth import ROOT


def test_config_reference_is_generated_from_the_schema():
    result = subprocess.run(
        [sys.executable, "tools/config_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
