"""Print the stacks of a cloud assembly and how many resources each template holds (run by `make synth`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(outdir: Path) -> list[tuple[str, int]]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    rows = []
    for name, artifact in sorted(manifest["artifacts"].items()):
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        template = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
        rows.append((name, len(template.get("Resources", {}))))
    return rows


def main() -> None:
    outdir = Path(sys.argv[1] if len(sys.argv) > 1 else "cdk.out")
    rows = summary(outdir)
    width = max(len(name) for name, _ in rows)
    print(f"Synthesized {len(rows)} stacks into {outdir}/:")
    for name, count in rows:
        print(f"  {name:<{width}}  {count:>4} resources")
    print(f"  {'total':<{width}}  {sum(c for _, c in rows):>4} resources")


if __name__ == "__main__":
    main()
