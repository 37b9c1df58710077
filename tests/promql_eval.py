"""A small PromQL evaluator for the simple forms the rules use, over synthetic series, on promql-parser's AST.

Supported: selectors with ``=`` and ``=~`` matchers, ``rate`` and ``increase`` over a range (counters given as functions of time, so a rate is
the exact slope over the window), ``sum``/``max`` with ``by``, ``clamp_min``, arithmetic and comparison operators
between vectors (one-to-one, ``ignoring``) and with scalars, ``and`` and ``or``. Anything else raises, so a rule that
leaves these forms is noticed rather than mis-evaluated. Instant vectors are ``{frozenset(labels): value}``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import promql_parser as pp

Labels = frozenset
Vector = dict

ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": lambda a, b: a / b if b else float("nan")}
COMPARE = {
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    ">=": operator.ge,
    "<=": operator.le,
    "!=": operator.ne,
}


@dataclass
class Series:
    labels: dict[str, str]
    value: Callable[[float], float]
    """Value at time t (seconds); counters grow with t."""


@dataclass
class World:
    series: list[Series] = field(default_factory=list)
    recorded: dict[str, Vector] = field(default_factory=dict)

    def add(self, name: str, value: Callable[[float], float] | float, **labels: str) -> None:
        fn = value if callable(value) else (lambda t, v=value: v)
        self.series.append(Series({"__name__": name, **labels}, fn))

    def record(self, name: str, vector: Vector, extra: dict[str, str]) -> None:
        out = self.recorded.setdefault(name, {})
        for labels, value in vector.items():
            out[frozenset({**dict(labels), **extra, "__name__": name}.items())] = value


def _select(world: World, node, t: float, window: float | None = None) -> Vector:
    name = node.name
    matchers = [(m.name, str(m.op), m.value) for m in node.matchers.matchers]
    assert all(op in ("MatchOp.Equal", "MatchOp.Re") for _, op, _ in matchers), matchers

    def matches(labels: dict) -> bool:
        return all(
            re.fullmatch(v, labels.get(k, "")) if op == "MatchOp.Re" else labels.get(k) == v for k, op, v in matchers
        )

    out: Vector = {}
    if name in world.recorded:
        assert window is None, "rate over a recorded series"
        for labels, value in world.recorded[name].items():
            if matches(dict(labels)):
                out[labels] = value
        return out
    for s in world.series:
        if s.labels["__name__"] != name or not matches(s.labels):
            continue
        value = s.value(t) if window is None else (s.value(t) - s.value(t - window)) / window
        out[frozenset(s.labels.items())] = value
    return out


def _drop_name(labels) -> frozenset:
    return frozenset((k, v) for k, v in labels if k != "__name__")


def evaluate(world: World, expr: str | object, t: float) -> Vector | float:
    node = pp.parse(expr) if isinstance(expr, str) else expr
    return _eval(world, node, t)


def _eval(world: World, node, t: float):
    if isinstance(node, pp.NumberLiteral):
        return node.val
    if isinstance(node, pp.ParenExpr):
        return _eval(world, node.expr, t)
    if isinstance(node, pp.VectorSelector):
        return _select(world, node, t)
    if isinstance(node, pp.Call):
        name = node.func.name
        if name in ("rate", "increase"):
            matrix = node.args[0]
            window = matrix.range.total_seconds()
            scale = window if name == "increase" else 1.0
            return {_drop_name(k): v * scale for k, v in _select(world, matrix.vector_selector, t, window).items()}
        if name == "clamp_min":
            vector, low = _eval(world, node.args[0], t), _eval(world, node.args[1], t)
            return {_drop_name(k): max(v, low) for k, v in vector.items()}
        if name == "absent":
            return {} if _eval(world, node.args[0], t) else {frozenset(): 1.0}
        if name == "histogram_quantile":
            return _quantile(_eval(world, node.args[0], t), _eval(world, node.args[1], t))
        raise NotImplementedError(name)
    if isinstance(node, pp.AggregateExpr):
        op = str(node.op)
        assert op in ("sum", "max"), op
        by = list(node.modifier.labels) if node.modifier else []
        assert not node.modifier or str(node.modifier.type) == "AggModifierType.By"
        groups: dict[frozenset, list[float]] = {}
        for labels, value in _eval(world, node.expr, t).items():
            key = frozenset((k, v) for k, v in labels if k in by)
            groups.setdefault(key, []).append(value)
        return {k: (sum(v) if op == "sum" else max(v)) for k, v in groups.items()}
    if isinstance(node, pp.BinaryExpr):
        return _binary(world, node, t)
    raise NotImplementedError(type(node).__name__)


def _quantile(q: float, buckets: Vector) -> Vector:
    """Prometheus's bucket interpolation: the rank's bucket, linearly between its bounds."""
    groups: dict[frozenset, list[tuple[float, float]]] = {}
    for labels, count in buckets.items():
        le = float(dict(labels)["le"])
        groups.setdefault(frozenset((k, v) for k, v in labels if k not in ("le", "__name__")), []).append((le, count))
    out = {}
    for key, points in groups.items():
        points.sort()
        total = points[-1][1]
        if total <= 0:
            continue
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in points:
            if count >= rank:
                out[key] = (
                    lower if upper == float("inf") else lower + (upper - lower) * (rank - below) / (count - below)
                )
                break
            lower, below = upper, count
    return out


def _binary(world: World, node, t: float):
    op = str(node.op)
    lhs, rhs = _eval(world, node.lhs, t), _eval(world, node.rhs, t)
    ignoring = []
    if node.modifier and node.modifier.matching:
        assert str(node.modifier.matching.type) == "LabelModifierType.Exclude", "only ignoring() is supported"
        ignoring = list(node.modifier.matching.labels)

    def key(labels) -> frozenset:
        return frozenset((k, v) for k, v in labels if k != "__name__" and k not in ignoring)

    if op in ("and", "or"):
        right = {key(k) for k in rhs}
        if op == "and":
            return {k: v for k, v in lhs.items() if key(k) in right}
        left = {key(k) for k in lhs}
        return {**lhs, **{k: v for k, v in rhs.items() if key(k) not in left}}
    fn = ARITH.get(op) or COMPARE[op]
    compare = op in COMPARE
    if not isinstance(lhs, dict) and not isinstance(rhs, dict):
        return fn(lhs, rhs)
    if not isinstance(rhs, dict) or not isinstance(lhs, dict):
        vector, scalar = (lhs, rhs) if isinstance(lhs, dict) else (rhs, lhs)
        out = {}
        for labels, value in vector.items():
            a, b = (value, scalar) if isinstance(lhs, dict) else (scalar, value)
            if compare:
                if fn(a, b):
                    out[labels] = value
            else:
                out[_drop_name(labels)] = fn(a, b)
        return out
    right = {key(k): v for k, v in rhs.items()}
    out = {}
    for labels, value in lhs.items():
        other = right.get(key(labels))
        if other is None:
            continue
        if compare:
            if fn(value, other):
                out[labels] = value
        else:
            out[frozenset((k, v) for k, v in labels if k != "__name__" and k not in ignoring)] = fn(value, other)
    return out


def run_rules(world: World, groups: dict, t: float) -> dict[str, Vector]:
    """Evaluate every recording rule in order (later rules read earlier ones); returns the alerts' vectors."""
    alerts: dict[str, Vector] = {}
    for group in groups["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                world.record(rule["record"], evaluate(world, rule["expr"], t), rule.get("labels", {}))
            else:
                fired = evaluate(world, rule["expr"], t)
                alerts.setdefault(rule["alert"], {}).update(fired)
    return alerts


def value(world: World, name: str, **labels: str) -> float | None:
    for key, v in world.recorded.get(name, {}).items():
        if all(dict(key).get(k) == val for k, val in labels.items()):
            return v
    return None
