"""The one toleration type: every pod kvtiers runs on HyperPod nodes tolerates the groups' custom taints with it
(Curvine's masters, workers and janitor, the engines, the dependency chart's device plugins)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from cdk8s_plus_33 import k8s

from kvtiers.catalog.platform_defaults import TAINT_EFFECT, TaintEffect
from kvtiers.checks import invalid, one_of


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """Tolerates a node taint: ``key=value:effect``, or any value of ``key`` when ``value`` is None.

    :param key: the taint's key.
    :param value: the taint's value; ``None`` tolerates any value (operator ``Exists``). @default None
    :param effect: @default ``NoSchedule``
    """

    key: str
    value: str | None = None
    effect: TaintEffect = TAINT_EFFECT

    def __post_init__(self) -> None:
        if not self.key:
            raise invalid(self, "key", "is required")
        if self.value == "":
            raise invalid(self, "value", "is empty: give None to tolerate any value")
        one_of(self, "effect", self.effect, TaintEffect)

    @property
    def operator(self) -> Literal["Equal", "Exists"]:
        return "Exists" if self.value is None else "Equal"

    def to_k8s(self) -> k8s.Toleration:
        return k8s.Toleration(key=self.key, operator=self.operator, value=self.value, effect=self.effect)

    def to_dict(self) -> dict[str, str]:
        """As in a pod spec (Helm values)."""
        value = {} if self.value is None else {"value": self.value}
        return {"key": self.key, "operator": self.operator, **value, "effect": self.effect}


def tolerating(taints: Iterable[tuple[str, str, TaintEffect]]) -> tuple[Toleration, ...]:
    """One toleration per distinct ``(key, value, effect)`` taint (an empty value: any value), in a stable order."""
    return tuple(Toleration(key=k, value=v or None, effect=e) for k, v, e in sorted(set(taints)))
