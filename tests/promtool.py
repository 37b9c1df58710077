"""Run the rendered rule groups through Prometheus's own rule engine: ``promtool test rules`` (Prometheus 2.42.0 from
Debian's package, unpacked by ``make test``: tools/promtool.py) on synthetic series.

A test describes series in promtool's expanding notation (``'0+30x840'``: start 0, +30 per step, 840 steps) and
what it expects at an evaluation time: the value of an expression (:func:`rounded` for non-integers: promtool compares
exactly), or which alerts fire (``ALERTS{alertstate="firing"}``, which promtool's evaluation writes like
Prometheus does). Every expectation is checked by promtool; a failure shows promtool's own diff.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tools.promtool import DEB_VERSION, PROMTOOL

STEP_SECONDS = 30


def labels_text(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def counter(per_second: float, steps: int, *, then: float | None = None, from_step: int | None = None) -> str:
    """A counter growing by ``per_second`` from 0, or by ``then`` per second from step ``from_step`` on."""
    per_step = per_second * STEP_SECONDS
    if then is None or from_step is None:
        return f"0+{per_step:g}x{steps}"
    return f"0+{per_step:g}x{from_step} {per_step * from_step + then * STEP_SECONDS:g}+{then * STEP_SECONDS:g}x{steps - from_step - 1}"


def gauge(value: float, steps: int) -> str:
    return f"{value:g}x{steps}"


def rounded(expr: str, to: float = 0.001) -> str:
    return f"round({expr}, {to:g})"


@dataclass
class RuleTest:
    """One promtool test: series sampled every 30 s, and expectations at evaluation times."""

    series: dict[str, str] = field(default_factory=dict)
    """``labels_text(name, labels)`` -> values in promtool's notation."""
    expectations: list[dict] = field(default_factory=list)

    def add(self, name: str, values: str, **labels: str) -> None:
        self.series[labels_text(name, labels)] = values

    def drop(self, predicate) -> None:
        """Remove the series whose text ``predicate`` accepts (a pod that is gone has no series at all)."""
        self.series = {k: v for k, v in self.series.items() if not predicate(k)}

    def expect(self, expr: str, at: str, samples: list[tuple[dict[str, str], float]]) -> None:
        """``samples``: (labels, value) of every series the expression returns at ``at``; empty: none."""
        self.expectations.append(
            {
                "expr": expr,
                "eval_time": at,
                "exp_samples": [{"labels": labels_text("", labels), "value": value} for labels, value in samples],
            }
        )

    def expect_firing(self, alert: str, at: str, alerts: list[dict[str, str]], **where: str) -> None:
        """Exactly these alerts named ``alert`` (and with the labels ``where``) are firing at ``at``, each given by
        all its labels but the name."""
        matchers = "".join(f',{k}="{v}"' for k, v in where.items())
        self.expect(
            f'ALERTS{{alertname="{alert}",alertstate="firing"{matchers}}}',
            at,
            [({"__name__": "ALERTS", "alertname": alert, "alertstate": "firing", **labels}, 1) for labels in alerts],
        )

    def to_dict(self) -> dict:
        return {
            "interval": f"{STEP_SECONDS}s",
            "input_series": [{"series": s, "values": v} for s, v in self.series.items()],
            "promql_expr_test": self.expectations,
        }


def promtool() -> Path:
    assert PROMTOOL.is_file(), (
        f"promtool is not at {PROMTOOL}: `make test` unpacks it from Debian's prometheus {DEB_VERSION} "
        "(or run `python tools/promtool.py install`)"
    )
    return PROMTOOL


def run_rule_tests(tmp_path: Path, rule_groups: dict, tests: list[RuleTest]) -> None:
    """``promtool check rules`` on the rule file, then ``promtool test rules``; fails with promtool's output."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups, sort_keys=False, width=1000))
    checked = subprocess.run([str(promtool()), "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    interval = {g.get("interval", "1m") for g in rule_groups["groups"]}
    assert len(interval) == 1, f"one evaluation interval expected, got {interval}"
    unit = tmp_path / "tests.yaml"
    unit.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name],
                "evaluation_interval": interval.pop(),
                "tests": [t.to_dict() for t in tests],
            },
            sort_keys=False,
            width=1000,
        )
    )
    result = subprocess.run(
        [str(promtool()), "test", "rules", unit.name], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
