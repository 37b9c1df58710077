"""Synth-time L2 decisions, one line per endpoint, from the environment's sizing (nothing recomputed)."""

from __future__ import annotations

from kvtiers.config.schema import Environment


def l2_report(env: Environment) -> tuple[str, ...]:
    return tuple(f"{s.name}: L2 {'on' if s.l2_enabled else 'off'} ({s.l2_reason})" for s in env.sizing.endpoints)
