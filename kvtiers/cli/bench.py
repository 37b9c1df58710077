"""``kvtiers bench``: cold vs warm TTFT per prompt length, multi-turn replay and cross-replica (L2) mode."""

from __future__ import annotations

import csv
import importlib
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvtiers.cli import prompts
from kvtiers.cli.openai_client import BenchError, StreamingClient

DEFAULT_LENGTHS = (500, 1000, 2500, 3000)


@dataclass
class Row:
    prompt_tokens: int
    cold_ttft_ms: float
    warm_ttft_ms: float
    speedup: float
    target_tokens: int
    mode: str = "single"
    turn: int | None = None
    cold_total_ms: float | None = None
    warm_total_ms: float | None = None
    length_measured: bool = True
    """False when the server has no /tokenize and the prompt was sized by estimate (prompt_tokens is still the
    server's usage count)."""

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class BenchResult:
    rows: list[Row] = field(default_factory=list)
    turn_rows: list[Row] = field(default_factory=list)
    cross_replica: bool = False

    def all_rows(self) -> list[Row]:
        return self.rows + self.turn_rows


def _speedup(cold: float, warm: float) -> float:
    return round(cold / warm, 3) if warm > 0 else float("inf")


def _usage(completion, fallback: int) -> int:
    return completion.prompt_tokens if completion.prompt_tokens is not None else fallback


def run_lengths(
    cold: StreamingClient,
    warm: StreamingClient,
    lengths: list[int],
    repeats: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    rows = []
    for target in lengths:
        body, measured = prompts.sized_filler(target, cold.count_tokens)
        colds, warms, counts = [], [], []
        for r in range(repeats):
            prompt = prompts.prefix(prompts.nonce()) + body
            progress(f"{target} tokens: cold {r + 1}/{repeats}")
            c = cold.complete(prompt)
            progress(f"{target} tokens: warm {r + 1}/{repeats}")
            w = warm.complete(prompt)
            colds.append(c.ttft_ms)
            warms.append(w.ttft_ms)
            counts.append(_usage(c, target))
        cold_ms, warm_ms = statistics.median(colds), statistics.median(warms)
        rows.append(
            Row(
                prompt_tokens=int(statistics.median(counts)),
                cold_ttft_ms=round(cold_ms, 1),
                warm_ttft_ms=round(warm_ms, 1),
                speedup=_speedup(cold_ms, warm_ms),
                target_tokens=target,
                length_measured=measured,
            )
        )
    return rows


def run_turns(
    cold: StreamingClient,
    warm: StreamingClient,
    turns: int,
    first_tokens: int,
    turn_tokens: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    """Replay a conversation: turn k's prompt is turn k-1's prompt + its answer + a new question.

    Warm: one conversation, so each turn can reuse the cached prefix of the previous one. With a distinct warm
    replica the turns alternate between the two URLs, so every reuse crosses replicas (the L2). Cold: the same
    turn prompts, each behind a fresh unique prefix, so nothing is reusable.
    """
    context, _ = prompts.sized_filler(first_tokens, cold.count_tokens)
    tag = prompts.nonce()
    transcript = f"{context}\nUser: question 1, {prompts.filler(turn_tokens)}\nAssistant:"
    rows = []
    for k in range(1, turns + 1):
        prompt = prompts.prefix(tag) + transcript
        client = warm if (warm is not cold and k % 2 == 0) else cold
        progress(f"turn {k}/{turns}: warm")
        w = client.complete(prompt)
        progress(f"turn {k}/{turns}: cold")
        c = cold.complete(prompts.prefix(prompts.nonce()) + transcript)
        rows.append(
            Row(
                prompt_tokens=_usage(w, 0),
                cold_ttft_ms=round(c.ttft_ms, 1),
                warm_ttft_ms=round(w.ttft_ms, 1),
                speedup=_speedup(c.ttft_ms, w.ttft_ms),
                target_tokens=first_tokens,
                mode="multi_turn",
                turn=k,
                cold_total_ms=round(c.total_ms, 1),
                warm_total_ms=round(w.total_ms, 1),
            )
        )
        transcript += f" {w.text.strip()}\nUser: question {k + 1}, {prompts.filler(turn_tokens)}\nAssistant:"
    return rows


def write_csv(path: Path, rows: list[Row]) -> None:
    fields = [
        "mode",
        "turn",
        "prompt_tokens",
        "cold_ttft_ms",
        "warm_ttft_ms",
        "speedup",
        "cold_total_ms",
        "warm_total_ms",
    ]
    with Path(path).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def check_plotting() -> None:
    """Raise :class:`BenchError` unless matplotlib, the optional ``plot`` extra, is installed (checked before a bench
    runs, so that a missing extra does not cost a whole run)."""
    try:
        importlib.import_module("matplotlib")
    except ModuleNotFoundError:
        raise BenchError("--plot needs matplotlib: pip install 'kvtiers[plot]'") from None


def write_plot(path: Path, rows: list[Row], title: str) -> None:
    check_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r.prompt_tokens)
    xs = [r.prompt_tokens for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [r.cold_ttft_ms for r in rows], marker="o", label="cold (full prefill)")
    ax.plot(xs, [r.warm_ttft_ms for r in rows], marker="o", label="warm (cached prefix)")
    ax.set_xlabel("prompt tokens (server count)")
    ax.set_ylabel("TTFT (ms, median)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = [
    "DEFAULT_LENGTHS",
    "BenchError",
    "BenchResult",
    "Row",
    "check_plotting",
    "run_lengths",
    "run_turns",
    "write_csv",
    "write_plot",
]


def render(result: BenchResult, url: str, warm_url: str | None):
    from kvtiers.cli.output import table

    where = f"cold {url}, warm {warm_url} (cross-replica)" if result.cross_replica else f"{url}"
    rows = [
        [
            f"{r.prompt_tokens:,}" + ("" if r.length_measured else " *"),
            f"{r.cold_ttft_ms:,.0f}",
            f"{r.warm_ttft_ms:,.0f}",
            f"{r.speedup:.2f}x",
            f"{r.cold_ttft_ms - r.warm_ttft_ms:,.0f}",
        ]
        for r in result.rows
    ]
    t = table(
        f"TTFT, median of repeats: {where}",
        ["prompt tokens", "cold ms", "warm ms", "speedup", "saved ms"],
        rows,
        right={0, 1, 2, 3, 4},
    )
    if any(not r.length_measured for r in result.rows):
        t.caption = "* server has no /tokenize: prompt sized by estimate; the count shown is the server's usage"
    return t


def render_turns(result: BenchResult):
    from kvtiers.cli.output import table

    turns = result.turn_rows
    rows = [
        [r.turn, f"{r.prompt_tokens:,}", f"{r.cold_ttft_ms:,.0f}", f"{r.warm_ttft_ms:,.0f}", f"{r.speedup:.2f}x"]
        for r in turns
    ]
    cold_total = sum(r.cold_total_ms or 0 for r in turns)
    warm_total = sum(r.warm_total_ms or 0 for r in turns)
    t = table(
        "multi-turn replay (warm: one conversation; cold: every turn behind a fresh prefix)",
        ["turn", "prompt tokens", "cold ms", "warm ms", "speedup"],
        rows,
        right={0, 1, 2, 3, 4},
    )
    t.caption = f"total latency: cold {cold_total / 1000:.2f} s, warm {warm_total / 1000:.2f} s"
    return t
