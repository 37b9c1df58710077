"""``kvtiers plan | verify | bench | top``: the command-line tool (the ``cli`` extra of the package)."""

from __future__ import annotations

import sys


def run() -> None:
    """The ``kvtiers`` console script: the library installs without the tool's dependencies, so say which extra
    brings them instead of a traceback."""
    try:
        from kvtiers.cli.main import app
    except ModuleNotFoundError as missing:
        sys.exit(f"error: kvtiers' command-line tool needs {missing.name!r}: pip install 'kvtiers[cli]'")
    app()
