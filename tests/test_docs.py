"""Generated documentation is current."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.synth import ROOT


def test_config_reference_is_generated_from_the_schema():
    result = subprocess.run(
        [sys.executable, "tools/config_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_the_readme_construct_example_is_the_example_apps_code():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- construct-example -->\n```python\n", 1)[1].split("```\n<!-- /construct-example -->", 1)[
        0
    ]
    app = textwrap.dedent((ROOT / "examples" / "reuse_app" / "app.py").read_text())
    lines = [line.strip() for line in app.splitlines()]
    wanted = [line.strip() for line in block.splitlines() if line.strip()]
    start = lines.index(wanted[0])
    assert [line for line in lines[start:] if line][: len(wanted)] == wanted, "the README excerpt drifted from the app"
