"""Waiting for another process's event, on a shared and loaded machine.

A test waits for the event itself (a line, a state, a file), never for a short wall-clock deadline: a busy 2-core
machine delays an event by seconds without anything being wrong. :data:`HANG_BOUND_SECONDS` only ends a wait whose
event never comes (a hang or a bug), so that the test fails with what it saw instead of blocking the suite; a wait
also ends at once when the process it waits on has exited.

Standard library only: the fault drills import it from their own venvs.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

HANG_BOUND_SECONDS = 300.0
"""Long enough that only a hang reaches it: the slowest event here (a router's start under a CPU hog on both
cores, with torch imports) took under a minute."""

T = TypeVar("T")


class NeverHappened(AssertionError):
    """The event did not come: the process waited on exited, or the hang bound passed."""


def until(
    probe: Callable[[], T],
    *,
    what: str,
    process: subprocess.Popen[Any] | None = None,
    seen: Callable[[], object] | None = None,
    poll: float = 0.05,
    bound: float = HANG_BOUND_SECONDS,
) -> T:
    """``probe()``'s first truthy answer (an exception counts as not yet). ``process``: the process that must bring
    the event, whose exit ends the wait; ``seen``: what to show when the event never comes."""
    hang_at = time.monotonic() + bound
    error: Exception | None = None
    while True:
        try:
            answer = probe()
        except Exception as exc:  # noqa: BLE001 - not listening yet, a half-written file: the event has not come
            answer, error = None, exc
        if answer:
            return answer
        if process is not None and process.poll() is not None:
            raise NeverHappened(f"{what}: the process exited ({process.returncode}) first; {_seen(seen, error)}")
        if time.monotonic() > hang_at:
            raise NeverHappened(f"{what}: not after {bound:.0f} s (a hang); {_seen(seen, error)}")
        time.sleep(poll)


def _seen(seen: Callable[[], object] | None, error: Exception | None) -> str:
    probe = "" if error is None else f"the probe's last error: {error!r}; "
    if seen is None:
        return probe or "nothing more to show"
    try:
        return f"{probe}last seen: {seen()}"
    except Exception as exc:  # noqa: BLE001 - the view itself failed: say so rather than hide the first failure
        return f"{probe}(could not show what was seen: {exc!r})"
