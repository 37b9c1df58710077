"""The outcome of one verify check."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CheckResult:
    area: str
    """``hyperpod``, ``curvine``, ``storage``, ``endpoint:<name>``, ``cross-pod:<name>``."""
    name: str
    ok: bool
    detail: str
    hint: str = ""
    """What to look at when the check failed."""

    def as_dict(self) -> dict:
        return asdict(self)


def passed(area: str, name: str, detail: str) -> CheckResult:
    return CheckResult(area, name, True, detail)


def failed(area: str, name: str, detail: str, hint: str) -> CheckResult:
    return CheckResult(area, name, False, detail, hint)
