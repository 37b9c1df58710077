"""Generate dashboards/<environment>.json (Grafana) for every environment file under config/.

``python tools/dashboards.py`` rewrites them; ``--check`` exits 1 when a committed dashboard is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtiers.config import load_environment
from kvtiers.observability.dashboard import dashboard

OUTPUT = ROOT / "dashboards"


def rendered() -> dict[Path, str]:
    out = {}
    for config in sorted((ROOT / "config").glob("*.yaml")):
        out[OUTPUT / f"{config.stem}.json"] = json.dumps(dashboard(load_environment(config)), indent=2) + "\n"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    files = rendered()
    if args.check:
        stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
        extra = sorted(str(p) for p in OUTPUT.glob("*.json") if p not in files)
        if stale or extra:
            print(
                f"stale or extra dashboards: {', '.join(stale + extra)}: run python tools/dashboards.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
