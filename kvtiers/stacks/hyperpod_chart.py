"""How the HyperPod dependency chart reaches the deploy graph: deployed from a vendored checkout at the pinned
commit, installed by the user between two deploy stages (``source: external``), or left out of an offline review
synth that is marked undeployable. Anything else stops synth with what to run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvtiers.config.schema import Environment
from kvtiers.constructs.hyperpod_dependencies import CHART_PATH


class DeployGraphError(Exception):
    """The deploy graph cannot be built as asked; ``str()`` says why and what to run."""


@dataclass(frozen=True)
class HyperPodChartPlan:
    chart_dir: Path | None
    """The vendored chart to deploy, or ``None``."""
    review_only: bool
    """An offline review synth without the chart: the platform template refuses to deploy."""


def vendored_chart(checkout: Path, revision: str) -> Path | None:
    """The chart in a ``make hyperpod-chart`` checkout, if there is one, after checking it is at ``revision``."""
    chart = checkout / CHART_PATH
    if not (chart / "Chart.yaml").is_file():
        return None
    head_file = checkout / ".git" / "HEAD"
    head = head_file.read_text().strip() if head_file.is_file() else "(no git HEAD)"
    if head != revision:
        raise DeployGraphError(
            f"{checkout} is at {head}, but hyperpod.dependency_chart.revision pins {revision}: "
            "run `make hyperpod-chart` again for this environment"
        )
    return chart


def plan_hyperpod_chart(env: Environment, chart_dir: Path | None, *, review: bool) -> HyperPodChartPlan:
    source = env.hyperpod.dependency_chart.source
    if source == "external":
        return HyperPodChartPlan(chart_dir=None, review_only=False)
    if chart_dir is not None:
        return HyperPodChartPlan(chart_dir=chart_dir, review_only=False)
    if review:
        return HyperPodChartPlan(chart_dir=None, review_only=True)
    raise DeployGraphError(
        "the HyperPod dependency chart is not vendored (hyperpod.dependency_chart.source is 'asset'), and HyperPod "
        "needs it before the cluster is created. Run `make hyperpod-chart` (needs git and the internet), or install "
        "it yourself with `dependency_chart.source: external` (docs/deploying.md: Deploying with an external dependency "
        "chart), or synthesize for review only with `-c kvtiers:review=true` (as `make synth` does)"
    )
