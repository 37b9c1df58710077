"""Read counters from Prometheus text exposition (vLLM's ``/metrics``, which also carries LMCache's metrics)."""

from __future__ import annotations

import math


def parse(text: str) -> dict[str, float]:
    """Sum of every sample per metric name (labels dropped). Comment lines and unparsable lines are skipped."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        sums[name.strip()] = sums.get(name.strip(), 0.0) + value
    return sums


def counter(samples: dict[str, float], name: str) -> float | None:
    """A counter by its registered name: prometheus_client exposes ``<name>_total``; older code the bare name."""
    for candidate in (f"{name}_total", name):
        if candidate in samples:
            return samples[candidate]
    return None
