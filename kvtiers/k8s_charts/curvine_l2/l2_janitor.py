"""Keeps the Curvine L2 below its high watermark by deleting the oldest LMCache chunk files (kvtiers).

Why a janitor: LMCache's ``fs://`` connector never deletes, and Curvine v0.4.1's quota eviction deletes only files
whose TTL has expired (``quota_manager.rs`` -> ``ttl_executor.rs``). A client TTL is no way out: the FUSE client
gives the same TTL to the directories it creates (``fuse_utils.rs`` ``mkdir_opts``), and an expired directory is
deleted with everything below it, including the L2 root and LMCache's per-pod temporary directories. So a CronJob
that mounts the L2 claim measures what is stored and removes the least recently written files, oldest first, from
the high watermark down to the low one. Standard library only: it runs in the engine image, already on GPU nodes.

    python3 l2_janitor.py ROOT CAPACITY_BYTES HIGH LOW [--dry-run]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkFile:
    path: str
    mtime: float
    size: int


def stored_files(root: str) -> list[ChunkFile]:
    """Every regular file below ``root``; unreadable entries (a file another pod just renamed) are skipped, but an
    unreadable ``root`` (a dead FUSE mount) raises: a janitor that sees nothing must not report success."""
    files: list[ChunkFile] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            if folder == root:
                raise
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    files.append(ChunkFile(entry.path, stat.st_mtime, stat.st_size))
            except OSError:
                continue
    return files


def victims(files: list[ChunkFile], capacity: int, high: float, low: float) -> list[ChunkFile]:
    """The oldest files whose removal brings the stored bytes from above ``high`` down to ``low`` of ``capacity``."""
    used = sum(f.size for f in files)
    if used < high * capacity:
        return []
    chosen, target = [], low * capacity
    for file in sorted(files, key=lambda f: f.mtime):
        if used <= target:
            break
        chosen.append(file)
        used -= file.size
    return chosen


def main(argv: list[str]) -> int:
    dry_run = "--dry-run" in argv
    root, capacity, high, low = [a for a in argv if a != "--dry-run"]
    files = stored_files(root)
    used = sum(f.size for f in files)
    chosen = victims(files, int(capacity), float(high), float(low))
    removed, freed, failed = 0, 0, 0
    for file in chosen:
        if not dry_run:
            try:
                os.unlink(file.path)
            except FileNotFoundError:
                continue  # already gone (another writer's rename or a previous run)
            except OSError:
                failed += 1
                continue
        removed += 1
        freed += file.size
    print(
        f"kvtiers l2-janitor: {len(files)} files, {used} of {capacity} bytes; removed {removed} files, "
        f"{freed} bytes{' (dry run)' if dry_run else ''}{f'; {failed} could not be removed' if failed else ''}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
