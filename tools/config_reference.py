"""Generate docs/config-reference.md from the environment schema (so the reference cannot drift from the code).

``python tools/config_reference.py`` rewrites the file; ``--check`` exits 1 when the committed file is stale.
"""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtiers.config.schema import Environment

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "config-reference.md"


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def _type_name(annotation) -> str:
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    for prefix in ("typing.", "kvtiers.config.schema.", "typing_extensions."):
        text = text.replace(prefix, "")
    return text.replace("|", "\\|")


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default if field.default_factory is None else field.default_factory()
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{value!r}`" if value not in ((), {}) else "empty"


def render() -> str:
    lines = [
        "# Environment file reference",
        "",
        "Generated from `kvtiers/config/schema.py` by `python tools/config_reference.py`; a test fails when it is stale.",
        "Unknown keys are rejected everywhere.",
        "",
    ]
    seen: set[type] = set()
    queue: list[tuple[str, type[BaseModel]]] = [("(top level)", Environment)]
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        lines += [f"## `{path}` ({model.__name__})", ""]
        if model.__doc__:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            description = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {description} |")
            prefix = "" if path == "(top level)" else f"{path}."
            for sub in _models_in(field.annotation):
                queue.append((f"{prefix}{name}", sub))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run python tools/config_reference.py", file=sys.stderr)
            sys.exit(1)
        return
    OUTPUT.write_text(text)


if __name__ == "__main__":
    main()
