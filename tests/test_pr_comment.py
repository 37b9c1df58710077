"""The pull request's comment (tools/pr_comment.py): kvtiers diff first, every environment's cdk diff after it, the
whole within GitHub's comment limit, what is cut pointing to the artifact; and the workflow steps that build it and
the job summary, run as the workflow runs them."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.synth import ROOT
from tests.test_workflow import WORKFLOW
from tools.pr_comment import GITHUB_COMMENT_LIMIT, LINE_LIMIT, comment, size

KVTIERS = "**kvtiers diff**: 1 error(s) in 2 environment(s)\n\n- dev: **1 error(s)**\n- prod: no errors\n"
ARTIFACT = "pull-request-diff (https://github.com/o/r/actions/runs/1/artifacts/2)"


def manifest_diff(stacks: int = 3, lines: int = 3000) -> str:
    """What `cdk diff` prints for a changed Kubernetes manifest: a ~100 KB single line, and many ordinary lines with
    the box-drawing characters it uses (3 bytes each in UTF-8)."""
    manifest = (
        '[~] Custom::AWSCDK-EKS-KubernetesResource EndpointLlama3170b\n └─ [~] Manifest\n     ├─ [-] "' + "x" * 98_600
    )
    body = "\n".join(f"     │   ├─ [+] line {i}: {'─' * 40}" for i in range(lines))
    return "\n".join(f"Stack kvtiers-prod-{n}\n{manifest}\n{body}" for n in range(stacks))


def test_a_small_comment_is_whole_kvtiers_first():
    text = comment(KVTIERS, [("dev.yaml", "Stack a\nThere were no differences\n")], artifact=ARTIFACT)
    assert text.startswith("## kvtiers diff\n\n" + KVTIERS)
    assert text.index(KVTIERS) < text.index("## cdk diff") < text.index("There were no differences")
    assert "<details><summary>dev.yaml</summary>" in text and "cut to fit" not in text


def test_a_huge_cdk_diff_is_cut_to_the_limit_with_the_kvtiers_part_whole_and_a_pointer():
    diffs = [("dev.yaml", "Stack kvtiers-dev-workloads\nThere were no differences\n"), ("prod.yaml", manifest_diff())]
    assert size(diffs[1][1]) > 5 * GITHUB_COMMENT_LIMIT
    text = comment(KVTIERS, diffs, artifact=ARTIFACT)
    assert size(text) <= GITHUB_COMMENT_LIMIT
    assert size(text) > GITHUB_COMMENT_LIMIT - LINE_LIMIT * 3  # the budget is used, not thrown away
    assert text.startswith("## kvtiers diff\n\n" + KVTIERS)
    assert "There were no differences" in text  # a small environment stays whole
    prod = text[text.index("<summary>prod.yaml</summary>") :]
    assert prod.rstrip().endswith("```\n</details>")
    assert "(line cut: " in prod and ARTIFACT in prod
    assert max(len(line) for line in text.splitlines()) < LINE_LIMIT + 100


def test_an_oversized_kvtiers_part_is_cut_first_and_the_cdk_blocks_still_close():
    kvtiers = KVTIERS + "\n".join(f"| Deployment.apps serving/e{i} | restart | 2 -> 2 |" for i in range(4000))
    text = comment(kvtiers, [("dev.yaml", manifest_diff(1, 10))], artifact=ARTIFACT)
    assert size(text) <= GITHUB_COMMENT_LIMIT
    assert text.startswith("## kvtiers diff\n\n" + KVTIERS) and ARTIFACT in text
    assert text.count("```") == 2 and text.rstrip().endswith("</details>")


def test_without_kvtiers_output_the_comment_says_it_did_not_finish():
    assert "kvtiers diff did not finish" in comment(None, [], artifact=ARTIFACT)


def _step(job: str, name_starts: str) -> dict:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
    return next(s for s in steps if s.get("name", "").startswith(name_starts))


def _run(script: str, cwd, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", script.replace("tools/pr_comment.py", str(ROOT / "tools/pr_comment.py"))],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_change_job_puts_the_kvtiers_diff_on_the_summary_page_even_when_it_fails(tmp_path):
    """No AWS credentials needed: the step runs whatever kvtiers diff's exit code was."""
    step = _step("change", "Show the kvtiers diff on the run's summary page")
    assert step["if"] == "always()"
    summary = tmp_path / "summary.md"
    (tmp_path / "kvtiers-diff.md").write_text(KVTIERS)
    assert _run(step["run"], tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)}).returncode == 0
    assert KVTIERS in summary.read_text()
    (tmp_path / "kvtiers-diff.md").unlink()  # a synth it refused: no Markdown
    assert _run(step["run"], tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)}).returncode == 0
    assert "kvtiers diff did not finish" in summary.read_text()


def test_the_diff_job_builds_the_comment_within_the_limit_from_the_outputs_it_uploads(tmp_path):
    step = _step("diff", "The comment")
    (tmp_path / "kvtiers-diff.md").write_text(KVTIERS)
    (tmp_path / "cdk-diff").mkdir()
    (tmp_path / "cdk-diff" / "dev.txt").write_text("There were no differences\n")
    (tmp_path / "cdk-diff" / "prod.txt").write_text(manifest_diff())
    result = _run(step["run"], tmp_path, {"ARTIFACT_URL": "https://example.invalid/artifact"})
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "diff.md").read_text()
    assert size(text) <= GITHUB_COMMENT_LIMIT and text.startswith("## kvtiers diff")
    assert "<summary>dev.yaml</summary>" in text and "https://example.invalid/artifact" in text
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["diff"]["steps"]
    upload = next(s for s in steps if s.get("id") == "full-diff")
    assert "cdk-diff/" in upload["with"]["path"] and "kvtiers-diff.md" in upload["with"]["path"]
    posted = " ".join(s.get("run", "") for s in steps)
    assert "tail -n" not in posted and "--body-file diff.md" in posted
