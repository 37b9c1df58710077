"""Write every Kubernetes object of the deploy graph as its own YAML file in the cloud assembly, so that a
reviewer diffs readable objects (``cdk.out/k8s/<stack>/<chart>/<kind>-<name>.yaml``) instead of one JSON string per
chart in the CloudFormation template.

Deploy-time values (volume IDs, role ARNs) are CDK tokens at synth; they are written as the CloudFormation
expression they resolve to, for example ``${Fn::GetAtt: [Vol1234, VolumeId]}``, so the files are deterministic.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import aws_cdk as cdk
import yaml

from kvtiers.stacks.workloads_stack import WorkloadsStack

STRING_TOKEN_MARKER = "${Token["
"""How aws-cdk-lib encodes a token inside a string (``TokenString``'s ``${Token[...]}``)."""


def _readable(stack: cdk.Stack, value):
    if isinstance(value, dict):
        return {k: _readable(stack, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(stack, v) for v in value]
    # Only strings that carry CDK's string-token marker can be unresolved: checking it here first saves a jsii
    # round trip for each of the thousands of plain strings (a quarter of a 20-endpoint synth).
    if isinstance(value, str) and STRING_TOKEN_MARKER in value and cdk.Token.is_unresolved(value):
        resolved = stack.resolve(value)
        return resolved if isinstance(resolved, str) else "${" + json.dumps(resolved, sort_keys=True) + "}"
    return value


def _file_name(obj: dict) -> str:
    name = obj.get("metadata", {}).get("name", "unnamed")
    namespace = obj.get("metadata", {}).get("namespace")
    stem = f"{obj['kind'].lower()}-{namespace + '.' if namespace else ''}{name}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) + ".yaml"


def write_k8s_yaml(stacks: list[WorkloadsStack], outdir: Path) -> list[Path]:
    """Write one file per object; returns the paths written."""
    root = Path(outdir) / "k8s"
    shutil.rmtree(root, ignore_errors=True)
    written = []
    for stack in stacks:
        for chart_name, chart_objects in stack.chart_objects.items():
            folder = root / stack.stack_name / chart_name
            folder.mkdir(parents=True, exist_ok=True)
            for obj in chart_objects:
                path = folder / _file_name(obj)
                if path in written:
                    raise ValueError(f"two objects of chart {chart_name} map to {path.name}")
                path.write_text(yaml.safe_dump(_readable(stack, obj), sort_keys=True))
                written.append(path)
    return written
