"""Print the pinned requirements of dependency groups of pyproject.toml, one a line, for ``pip install -r``.

pyproject.toml holds every Python pin of the project (PEP 735 ``[dependency-groups]`` for the tools). pip reads
groups itself only from 25.1 (``--group``); this reads them with the standard library, so any pip can install them
and nothing but PyPI is reached. Usage: ``python tools/pins.py GROUP [GROUP...]``.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(groups: dict[str, list[object]], name: str) -> list[str]:
    if name not in groups:
        raise SystemExit(f"error: no dependency group {name!r} in {PYPROJECT.name} (groups: {', '.join(groups)})")
    entries = groups[name]
    if not all(isinstance(entry, str) for entry in entries):
        raise SystemExit(f"error: dependency group {name!r}: only requirement strings are supported (no includes)")
    return [str(entry) for entry in entries]


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    groups = tomllib.loads(PYPROJECT.read_text())["dependency-groups"]
    for name in argv:
        print("\n".join(requirements(groups, name)))


if __name__ == "__main__":
    main(sys.argv[1:])
