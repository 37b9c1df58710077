"""``kvtiers diff``: synthesize the base revision and the working tree (or take two ``cdk.out`` folders) and report
what deploying one after the other does (:mod:`kvtiers.change.report`).

The base revision is exported with ``git archive`` into a temporary folder (the repository's worktrees and index are
not touched) and synthesized there with this Python, from that folder, so that its own ``kvtiers`` is imported. Both
synths of an environment run at the same time: the diff costs about one synth on a machine with two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvtiers.change.report import EnvironmentChange, assembly_change

SYNTH_WORKERS = 2


class DiffError(Exception):
    """A diff that cannot be computed (no git, an unknown revision, a synth that fails)."""


def context_json(tree: Path, config: Path) -> str:
    """The CDK context ``cdk synth`` would pass: the tree's cdk.json and cdk.context.json, the environment file and
    an offline review synth (no vendored HyperPod chart is needed to compare)."""
    context = json.loads((tree / "cdk.json").read_text())["context"]
    context.update(json.loads((tree / "cdk.context.json").read_text()))
    context["config"] = str(config)
    context["kvtiers:review"] = "true"
    return json.dumps(context)


def synth(tree: Path, config: Path, outdir: Path) -> Path:
    """``python app.py`` of ``tree`` for ``config`` (relative to the tree) into ``outdir``."""
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": context_json(tree, config),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    result = subprocess.run([sys.executable, "app.py"], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DiffError(f"synth of {config} in {tree} failed:\n{result.stderr[-3000:]}")
    return outdir


def export_revision(repo: Path, revision: str, folder: Path) -> Path:
    """``revision`` of the repository at ``repo``, exported (``git archive``) into ``folder``."""
    archive = folder / "base.tar"
    result = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", "-o", str(archive), revision],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise DiffError(f"git archive {revision}: {result.stderr.strip()}")
    tree = folder / "base"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def compare_trees(base: Path, head: Path, configs: Sequence[Path], folder: Path) -> list[EnvironmentChange]:
    """Each environment file synthesized in both trees (a file missing from the base: every resource is new)."""
    jobs: list[tuple[Path, Path, Path]] = []
    for config in configs:
        for side, tree in (("before", base), ("after", head)):
            outdir = folder / config.stem / side
            outdir.mkdir(parents=True)
            if (tree / config).is_file():
                jobs.append((tree, config, outdir))
    with ThreadPoolExecutor(SYNTH_WORKERS) as pool:
        for future in [pool.submit(synth, *job) for job in jobs]:
            future.result()
    return [
        assembly_change(config.stem, folder / config.stem / "before", folder / config.stem / "after")
        for config in configs
    ]


def diff_revision(repo: Path, revision: str, configs: Sequence[Path]) -> list[EnvironmentChange]:
    """``revision`` against the working tree at ``repo``."""
    with tempfile.TemporaryDirectory(prefix="kvtiers-diff-") as tmp:
        folder = Path(tmp)
        base = export_revision(repo, revision, folder)
        return compare_trees(base, repo, configs, folder / "out")
