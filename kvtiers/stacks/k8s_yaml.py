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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import yaml
from yaml.emitter import ScalarAnalysis

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
        stack_name = stack.stack_name
        for chart_name, chart_objects in stack.chart_objects.items():
            folder = root / stack_name / chart_name
            folder.mkdir(parents=True, exist_ok=True)
            for obj in chart_objects:
                path = folder / _file_name(obj)
                if path in written:
                    raise ValueError(f"two objects of chart {chart_name} map to {path.name}")
                path.write_text(dump_yaml(_readable(stack, obj)))
                written.append(path)
    return written


def dump_yaml(value: Any) -> str:
    """``yaml.safe_dump(value, sort_keys=True)``, character for character, in a third of the time."""
    return yaml.dump(value, Dumper=_SafeDumper, sort_keys=True)


# PyYAML's pure-Python emitter looks at every character of every scalar, one at a time, to choose a style, and again to
# write a double-quoted one; the ConfigMaps carry whole scripts, so that was most of the time spent here. libyaml's
# emitter is no way out: it folds long double-quoted scalars differently. These two methods compute the same as
# PyYAML 6.0's (safe_dump's settings: no allow_unicode, no encoding) with regular expressions, and skip the
# characters at which PyYAML's loop does nothing; tests/test_k8s_yaml.py compares them with PyYAML's own.
_WHITESPACE = "\x00 \t\r\n\x85\u2028\u2029"
_BREAKS = "\n\x85\u2028\u2029"
_LEADING_INDICATORS = "#,[]{}&*!|>'\"%@`"
_FLOW_INDICATOR = re.compile(r"[,?\[\]{}:]")
_COLON_BEFORE_SPACE = re.compile(":(?=[" + re.escape(_WHITESPACE) + "]|\\Z)")
_COMMENT = re.compile("(?<=[" + re.escape(_WHITESPACE) + "])#")
_LINE_BREAK = re.compile("[" + _BREAKS + "]")
_SPECIAL = re.compile(r"[^\n\x20-\x7e]")
_BREAK_SPACE = re.compile("[" + _BREAKS + "] ")
_SPACE_BREAK = re.compile(" [" + _BREAKS + "]")
_DOUBLE_QUOTED_ACTS = re.compile(r'[ "\\]|[^\x20-\x7e]')


class _SafeDumper(yaml.SafeDumper):
    def analyze_scalar(self, scalar: str) -> ScalarAnalysis:
        if not scalar or self.allow_unicode:
            return super().analyze_scalar(scalar)
        first, last = scalar[0], scalar[-1]
        followed_by_whitespace = len(scalar) == 1 or scalar[1] in _WHITESPACE
        block = flow = scalar.startswith(("---", "..."))
        if first in _LEADING_INDICATORS or (first == "-" and followed_by_whitespace):
            block = flow = True
        if first in "?:":
            flow = True
            block = block or followed_by_whitespace
        if _COMMENT.search(scalar):
            block = flow = True
        flow = flow or _FLOW_INDICATOR.search(scalar, 1) is not None
        block = block or _COLON_BEFORE_SPACE.search(scalar, 1) is not None
        line_breaks = _LINE_BREAK.search(scalar) is not None
        flow_plain = block_plain = single_quoted = block_style = True
        if first == " " or last == " " or first in _BREAKS or last in _BREAKS:
            flow_plain = block_plain = False
        if last == " ":
            block_style = False
        if _BREAK_SPACE.search(scalar):
            flow_plain = block_plain = single_quoted = False
        if _SPACE_BREAK.search(scalar) or _SPECIAL.search(scalar):
            flow_plain = block_plain = single_quoted = block_style = False
        if line_breaks:
            flow_plain = block_plain = False
        if flow:
            flow_plain = False
        if block:
            block_plain = False
        return ScalarAnalysis(
            scalar=scalar,
            empty=False,
            multiline=line_breaks,
            allow_flow_plain=flow_plain,
            allow_block_plain=block_plain,
            allow_single_quoted=single_quoted,
            allow_double_quoted=True,
            allow_block=block_style,
        )

    def write_double_quoted(self, text: str, split: bool = True) -> None:
        if self.allow_unicode or self.encoding:
            return super().write_double_quoted(text, split)
        # PyYAML's loop, over only the positions where it writes or may fold the line.
        self.write_indicator('"', True)
        write = self.stream.write
        start = 0
        for end in _double_quoted_positions(text):
            ch = text[end] if end < len(text) else None
            if ch is None or ch in '"\\' or not ("\x20" <= ch <= "\x7e"):
                if start < end:
                    self.column += end - start
                    write(text[start:end])
                    start = end
                if ch is not None:
                    if ch in self.ESCAPE_REPLACEMENTS:
                        data = "\\" + self.ESCAPE_REPLACEMENTS[ch]
                    elif ch <= "\xff":
                        data = f"\\x{ord(ch):02X}"
                    elif ch <= "\uffff":
                        data = f"\\u{ord(ch):04X}"
                    else:
                        data = f"\\U{ord(ch):08X}"
                    self.column += len(data)
                    write(data)
                    start = end + 1
            if (
                0 < end < len(text) - 1
                and (ch == " " or start >= end)
                and self.column + (end - start) > self.best_width
                and split
            ):
                data = text[start:end] + "\\"
                start = max(start, end)
                self.column += len(data)
                write(data)
                self.write_indent()
                self.whitespace = False
                self.indention = False
                if text[start] == " ":
                    self.column += 1
                    write("\\")
        self.write_indicator('"', False)
        return None


def _double_quoted_positions(text: str) -> Iterator[int]:
    """In order: every space and escaped character, the position after each escaped one (PyYAML may fold the line
    there), and the end. At any other position PyYAML's double-quoted writer does nothing."""
    last = -1
    for match in _DOUBLE_QUOTED_ACTS.finditer(text):
        position = match.start()
        if position > last:
            yield position
            last = position
        if text[position] != " " and position + 1 > last:
            yield position + 1
            last = position + 1
    if len(text) > last:
        yield len(text)
