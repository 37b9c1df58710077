"""The pull request's comment (and job summary): the ``kvtiers diff`` Markdown first, then each environment's
``cdk diff``, cut to fit GitHub's limit with a pointer to the workflow artifact that holds everything.

GitHub refuses a comment body over 65,536 characters (``gh pr comment`` then fails and the reviewer sees nothing),
and a job summary over 1 MiB. One changed Kubernetes ``Manifest`` string is a single line of ``cdk diff`` output of
up to about 100 KB, so lines are clipped as well as cut. Sizes are counted in UTF-8 bytes, never fewer than
characters, so the result fits whichever GitHub counts.

    python tools/pr_comment.py --kvtiers kvtiers-diff.md --artifact-url URL [cdk-diff/dev.txt ...] > comment.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

GITHUB_COMMENT_LIMIT = 65_536
"""Characters GitHub accepts in an issue or pull-request comment body."""
STEP_SUMMARY_LIMIT = 1024 * 1024
"""Bytes GitHub accepts in one step's ``$GITHUB_STEP_SUMMARY``."""
LINE_LIMIT = 2_000
"""Characters of one ``cdk diff`` line kept; the rest of the line is in the artifact."""
FENCE = "```"


def size(text: str) -> int:
    return len(text.encode())


def clip_line(line: str, limit: int = LINE_LIMIT) -> str:
    """``line`` cut to ``limit`` characters, saying how many it had."""
    return line if len(line) <= limit else f"{line[:limit]} … (line cut: {len(line)} characters)"


def cut(text: str, budget: int, pointer: str) -> str:
    """``text`` if it fits ``budget`` bytes; else its first lines, each clipped to :data:`LINE_LIMIT` characters,
    and a last line that says how many lines are left out and where to find them, within ``budget``."""
    if size(text) <= budget:
        return text
    lines = [clip_line(line) for line in text.splitlines()]
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        if used + size(line) + 1 + size(_note(len(lines) - index, pointer)) > budget:
            break
        kept.append(line)
        used += size(line) + 1
    note = _note(len(lines) - len(kept), pointer)
    return "\n".join([*kept, note]) if used + size(note) <= budget else ""


def _note(left_out: int, pointer: str) -> str:
    shown = f"{left_out} more line(s) not shown, long lines cut" if left_out else "long lines cut"
    return f"… cut to fit GitHub's limit: {shown}; {pointer}"


def _frame(name: str) -> tuple[str, str]:
    """What comes before and after one environment's ``cdk diff`` output: a collapsed block."""
    return f"<details><summary>{name}</summary>\n\n{FENCE}\n", f"\n{FENCE}\n</details>\n"


def comment(
    kvtiers: str | None,
    cdk_diffs: Sequence[tuple[str, str]],
    *,
    artifact: str,
    limit: int = GITHUB_COMMENT_LIMIT,
) -> str:
    """The comment: ``## kvtiers diff`` (``kvtiers`` is None when it did not finish), then ``## cdk diff`` with one
    collapsed block per (environment, output), all within ``limit`` bytes. What is cut points to ``artifact``."""
    pointer = f"the full output is in the workflow artifact {artifact}"
    head = "## kvtiers diff\n\n"
    body = kvtiers if kvtiers is not None else "kvtiers diff did not finish: its job's log says why.\n"
    cdk_head = "\n## cdk diff\n\n" if cdk_diffs else ""
    frames = [_frame(name) for name, _ in cdk_diffs]
    fixed = size(head) + size(cdk_head) + sum(size(a) + size(b) for a, b in frames)
    # The kvtiers part first: it may take everything but what the cdk diff blocks' frames need.
    text = head + cut(body.rstrip("\n"), limit - fixed - 1, pointer) + "\n" + cdk_head
    left = limit - size(text) - sum(size(a) + size(b) for a, b in frames)
    # Small outputs whole, then each larger one gets an equal share of what remains.
    order = sorted(range(len(cdk_diffs)), key=lambda i: size(cdk_diffs[i][1]))
    shares: dict[int, str] = {}
    for position, index in enumerate(order):
        share = max(left // (len(order) - position), 0)
        shares[index] = cut(cdk_diffs[index][1].rstrip("\n"), share, pointer)
        left -= size(shares[index])
    for index, (before, after) in enumerate(frames):
        text += before + shares[index] + after
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvtiers", type=Path, required=True, help="kvtiers diff's Markdown (may be missing)")
    parser.add_argument("--artifact", required=True, help="where the full outputs are (the artifact's name or URL)")
    parser.add_argument("--limit", type=int, default=GITHUB_COMMENT_LIMIT, help="bytes (default: a comment's)")
    parser.add_argument("cdk_diff", type=Path, nargs="*", help="one file per environment: <environment>.txt")
    args = parser.parse_args(argv)
    kvtiers = args.kvtiers.read_text() if args.kvtiers.is_file() else None
    diffs = [(f"{path.stem}.yaml", path.read_text(errors="replace")) for path in args.cdk_diff]
    sys.stdout.write(comment(kvtiers, diffs, artifact=args.artifact, limit=args.limit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
