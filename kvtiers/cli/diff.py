"""``kvtiers diff``: synthesize the base revision and the working tree (or take two ``cdk.out`` folders) and report
what deploying one after the other does (:mod:`kvtiers.change.report`).

The base revision is exported with ``git archive`` into a temporary folder (the repository's worktrees and index are
not touched) and synthesized there, from that folder, so that its own ``kvtiers`` is imported, with its own pinned
dependencies (:mod:`kvtiers.cli.synth_env`). Both synths of an environment run at the same time: on a machine with two
cores an environment's diff costs about one synth of it (docs/change-model.md, "Cost").
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
from dataclasses import dataclass
from pathlib import Path

from kvtiers.change.report import EnvironmentChange, assembly_change
from kvtiers.cli.synth_env import (
    BaseEnv,
    PinChange,
    SynthEnv,
    base_env,
    cache_folder,
    head_env,
    pin_changes,
    read_lock,
    synth_closure,
)

SYNTH_WORKERS = 2


class DiffError(Exception):
    """A diff that cannot be computed (no git, an unknown revision, a synth that fails)."""


def context_json(tree: Path, config: Path) -> str:
    """The CDK context ``cdk synth`` would pass: the tree's cdk.json and cdk.context.json, the environment file and
    an offline review synth (no vendored HyperPod chart is needed to compare)."""
    context: dict[str, object] = {}
    for name in ("cdk.json", "cdk.context.json"):
        if (tree / name).is_file():
            found = json.loads((tree / name).read_text())
            context.update(found.get("context", {}) if name == "cdk.json" else found)
    context["config"] = str(config)
    context["kvtiers:review"] = "true"
    return json.dumps(context)


def synth(tree: Path, config: Path, outdir: Path, with_env: SynthEnv | None = None) -> Path:
    """``python app.py`` of ``tree`` for ``config`` (relative to the tree) into ``outdir``, with this interpreter or
    ``with_env``'s."""
    using = with_env or SynthEnv(sys.executable)
    env = {
        **using.environ(os.environ),
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": context_json(tree, config),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    try:
        result = subprocess.run(
            [using.python, "app.py"], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
    except OSError as error:  # an interpreter that is gone
        raise DiffError(f"synth of {config} in {tree} could not start {using.python}: {error}") from error
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


def compare_trees(
    base: Path,
    head: Path,
    configs: Sequence[Path],
    folder: Path,
    with_envs: tuple[SynthEnv | None, SynthEnv | None] = (None, None),
) -> list[EnvironmentChange]:
    """Each environment file (relative to the trees) synthesized in both trees, with the base's and the head's
    ``with_envs`` (default: this interpreter). A file missing from the base: every resource is new."""
    jobs: list[tuple[Path, Path, Path, SynthEnv | None]] = []
    for config in configs:
        for side, tree, env in (("before", base, with_envs[0]), ("after", head, with_envs[1])):
            outdir = folder / config.stem / side
            outdir.mkdir(parents=True)
            if (tree / config).is_file():
                jobs.append((tree, config, outdir, env))
    with ThreadPoolExecutor(SYNTH_WORKERS) as pool:
        for future in [pool.submit(synth, *job) for job in jobs]:
            future.result()
    return [
        assembly_change(config.stem, folder / config.stem / "before", folder / config.stem / "after")
        for config in configs
    ]


def repository_root(repo: Path) -> Path:
    result = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise DiffError(f"{repo}: not in a git repository ({result.stderr.strip()})")
    return Path(result.stdout.strip()).resolve()


def in_repository(root: Path, config: Path, cwd: Path) -> Path:
    """``config`` (absolute, or relative to ``cwd``) as a path inside the repository at ``root``: the same file in
    both trees."""
    path = (cwd / config).resolve()
    if not path.is_relative_to(root):
        raise DiffError(
            f"{config}: not inside the repository {root}, so the base revision has no version of it to compare "
            "with (the same file would be synthesized on both sides); give an environment file of the repository"
        )
    return path.relative_to(root)


@dataclass(frozen=True)
class RevisionDiff:
    changes: list[EnvironmentChange]
    pins: tuple[PinChange, ...]
    """The synth's pins that differ between the base and the working tree."""
    base: BaseEnv
    """What the base was synthesized with, and why its dependencies were not compared if they were not."""

    @property
    def compared(self) -> bool:
        """Whether the base was synthesized with its own dependencies (or they equal the working tree's)."""
        return not self.base.not_compared

    def dependency_lines(self) -> list[str]:
        """For the report: a summary line when the pins differ or were not compared, then a table of the pins."""
        unused = [p.package for p in self.pins if p.package in self.base.unused]
        if self.base.not_compared:
            reasons = "; ".join(self.base.not_compared)
            summary = (
                f"- **dependencies were not compared**: {reasons}; the base was synthesized with this change's "
                "dependencies, so what they change in the templates is not shown"
            )
        elif self.base.built:
            built = ", ".join(f"`{folder}`" for folder in self.base.built)
            summary = (
                f"- dependencies: {len(self.pins)} pin(s) changed; the base was synthesized with its own ({built})"
            )
        elif self.pins:
            summary = (
                f"- dependencies: {len(self.pins)} pin(s) changed, none that the synth runs (the CDK CLI deploys, it "
                "does not synthesize)"
            )
        else:
            return []
        lines = [summary]
        if unused:
            lines.append(f"- not used by the synth (no part of the base's venv): {', '.join(unused)}")
        table = ["| package | base | this change |", "|---|---|---|"]
        table += [f"| {p.package} | {p.base} | {p.head} |" for p in self.pins]
        return [*lines, "", "### Dependencies", "", *table] if self.pins else lines


def diff_revision(repo: Path, revision: str, configs: Sequence[Path]) -> RevisionDiff:
    """``revision`` against the working tree of the repository ``repo`` is in, for ``configs`` (absolute or relative
    to ``repo``), the base synthesized with its own pinned dependencies."""
    root = repository_root(repo)
    paths = [in_repository(root, config, repo) for config in configs]
    with tempfile.TemporaryDirectory(prefix="kvtiers-diff-") as tmp:
        folder = Path(tmp)
        base = export_revision(root, revision, folder)
        base_lock, head_lock, head_with = read_lock(base), read_lock(root), head_env(root)
        used = synth_closure({*base_lock.requirements, *head_lock.requirements})
        env = base_env(base, base_lock, head_lock, cache_folder(), head_with, used)
        changes = compare_trees(base, root, paths, folder / "out", (env.env, head_with))
        return RevisionDiff(changes, pin_changes(base_lock, head_lock), env)
