"""A parsed, order-independent snapshot of what an environment synthesizes: every CloudFormation template and
every Kubernetes object. It pins the rendered output across refactors: formatting (JSON key order, the TOML
writer's quoting, YAML layout) and asset hashes do not count; any change of a value does.

Regenerate on purpose (and say why in the commit): ``.venv/bin/python -m tests.golden_snapshot``.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden"
ENVIRONMENTS = ("dev", "prod")
_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: item if key.endswith("sha256") else _normalize(item)
            for key, item in sorted(value.items())
            if key != "Metadata"
        }
    if isinstance(value, list):
        return [_normalize(item) for item in value]
    if isinstance(value, str):
        return _parse_embedded(value)
    return value


def _parse_embedded(text: str) -> Any:
    """Manifests are JSON strings inside the template, and ConfigMaps carry TOML: compare them parsed."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return _normalize(json.loads(stripped))
        except ValueError:
            pass
    if "\n" in stripped and "=" in stripped:
        try:
            return {"<toml>": _normalize(tomllib.loads(text))}
        except tomllib.TOMLDecodeError:
            pass
    return _ASSET_HASH.sub("<hash>", text)


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        found: list[str] = []
        for key in sorted(expected.keys() | actual.keys()):
            if key not in actual:
                found.append(f"{path}/{key}: removed")
            elif key not in expected:
                found.append(f"{path}/{key}: added")
            else:
                found.extend(_differences(expected[key], actual[key], f"{path}/{key}"))
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: {json.dumps(expected)[:200]} -> {json.dumps(actual)[:200]}"]


def _joined(value: Any) -> Any:
    """A manifest that embeds deploy-time values is a CloudFormation ``Fn::Join`` of JSON text around them: compare
    it parsed, each value marked in place, so that the key order of the text does not count (as everywhere else)."""
    if isinstance(value, dict):
        join = value.get("Fn::Join")
        if len(value) == 1 and isinstance(join, list) and len(join) == 2 and join[0] == "":
            text = "".join(
                part if isinstance(part, str) else json.dumps(f"<cfn {json.dumps(part, sort_keys=True)}>")[1:-1]
                for part in join[1]
            )
            try:
                return {"Fn::Join (parsed)": _normalize(json.loads(text))}
            except ValueError:
                pass
        return {key: _joined(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_joined(item) for item in value]
    return value


def differences(expected: Any, actual: Any) -> list[str]:
    """Where two snapshots differ, each ``Fn::Join`` manifest compared parsed."""
    return _differences(_joined(expected), _joined(actual))


def snapshot(outdir: Path) -> dict[str, Any]:
    templates = {path.name: _normalize(json.loads(path.read_text())) for path in sorted(outdir.glob("*.template.json"))}
    objects = {
        str(path.relative_to(outdir / "k8s")): _normalize(yaml.safe_load(path.read_text()))
        for path in sorted((outdir / "k8s").rglob("*.yaml"))
    }
    return {"templates": templates, "kubernetes": objects}


def golden_path(environment: str) -> Path:
    return GOLDEN_DIR / f"{environment}.json"


def main() -> None:
    import tempfile

    from tests.synth import synth

    for environment in ENVIRONMENTS:
        with tempfile.TemporaryDirectory() as tmp:
            synthesized = synth(f"config/{environment}.yaml", Path(tmp) / "cdk.out", nag=True)
            golden_path(environment).write_text(
                json.dumps(snapshot(synthesized.outdir), indent=1, sort_keys=True) + "\n"
            )
        print(f"wrote {golden_path(environment).relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
