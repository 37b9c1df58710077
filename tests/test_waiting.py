"""The suite waits for events (tests/waiting.py), and tools/under_load.py runs it on a loaded machine."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.waiting import NeverHappened, until


def test_a_wait_ends_with_the_event_and_the_probe_s_answer():
    answers = iter([None, ConnectionRefusedError(), "", "ready"])

    def probe():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert until(probe, what="ready", poll=0) == "ready"


def test_a_wait_ends_at_once_when_the_process_that_must_bring_the_event_exits():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    with pytest.raises(NeverHappened, match=r"the process exited \(3\) first; last seen: nothing yet"):
        until(lambda: False, what="a line", process=process, seen=lambda: "nothing yet")


def test_no_test_waits_for_a_deadline_of_its_own():
    """A deadline a test computes (the monotonic clock plus ten seconds) is what failed on a busy machine: every wait for
    another process goes through :func:`tests.waiting.until`."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "waiting.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"monotonic\(\)\s*\+", line)
    ]
    assert not found, found


def test_under_load_runs_the_command_beside_busy_processes_and_passes_its_status():
    command = [sys.executable, str(ROOT / "tools" / "under_load.py"), "--hogs", "1", "--"]
    result = subprocess.run(
        [*command, sys.executable, "-c", "import os; raise SystemExit(os.cpu_count() and 3)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3, result.stderr
    assert "beside 1 busy process(es)" in result.stderr
