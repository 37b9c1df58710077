"""Synthesize an environment exactly as `cdk synth` would (cdk.json feature flags + cdk.context.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import assertions

from kvtiers.config import load_environment
from kvtiers.stacks.deploy_graph import DeployGraph, build_deploy_graph, synthesize

ROOT = Path(__file__).resolve().parent.parent
SUPPORT_DATE = date(2026, 12, 3)
"""The day the tests synthesize for (EKS support of the Kubernetes version): fixed, never the clock."""


def cdk_context() -> dict:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context.update(json.loads((ROOT / "cdk.context.json").read_text()))
    return context


@dataclass
class Synthesized:
    graph: DeployGraph
    outdir: Path

    def template(self, stack: cdk.Stack) -> assertions.Template:
        return assertions.Template.from_json(self.template_json(stack))

    def template_json(self, stack: cdk.Stack) -> dict:
        return json.loads((self.outdir / f"{stack.stack_name}.template.json").read_text())

    @property
    def templates(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))


def synth(
    config: str | Path, outdir: Path, *, nag: bool = False, chart_dir: Path | None = None, eks_only: bool = False
) -> Synthesized:
    """Without ``chart_dir`` this is an offline review synth (the platform template refuses to deploy), as
    ``make synth`` does without a vendored chart."""
    app = cdk.App(context=cdk_context(), outdir=str(outdir))
    graph = build_deploy_graph(
        app,
        load_environment(ROOT / config),
        hyperpod_chart_dir=chart_dir,
        review=chart_dir is None,
        eks_only=eks_only,
        nag=nag,
        support_date=SUPPORT_DATE,
    )
    synthesize(app, graph)
    return Synthesized(graph=graph, outdir=outdir)


def refused_by_app(path: Path) -> str:
    """What the app refuses the environment file ``path`` with, as ``python app.py`` prints it after ``error: ``: the
    file's own problems, or (the file parsed) a construct's refusal of the props the file maps onto."""
    import pytest

    from kvtiers.config import ConfigError

    with pytest.raises((ConfigError, ValueError)) as refused:
        build_deploy_graph(cdk.App(context=cdk_context()), load_environment(path), review=True, nag=False)
    error = refused.value
    return str(error) if isinstance(error, ConfigError) else f"{path}: {error}"
