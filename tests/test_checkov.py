"""checkov, an independent scanner, over every synthesized template and every Kubernetes object of every
environment under config/: no finding may stay unacknowledged (checkov-acknowledgments.yaml)."""

from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
ACKNOWLEDGMENTS = ROOT / "checkov-acknowledgments.yaml"
ENVIRONMENTS = sorted(p.stem for p in (ROOT / "config").glob("*.yaml"))
BAD_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "bad", "namespace": "serving"},
    "spec": {
        "selector": {"matchLabels": {"app": "bad"}},
        "template": {
            "metadata": {"labels": {"app": "bad"}},
            "spec": {
                "hostPID": True,
                "containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": True}}],
            },
        },
    },
}


def acknowledgments() -> list[dict]:
    return yaml.safe_load(ACKNOWLEDGMENTS.read_text())


def command(framework: str, targets: list[str]) -> list[str]:
    return [str(CHECKOV), *targets, "--framework", framework, "--skip-download", "--compact", "--quiet", "-o", "json"]


def failed(output: str) -> list[tuple[str, str]]:
    reports = json.loads(output)
    reports = reports if isinstance(reports, list) else [reports]
    return [(r["check_id"], r["resource"]) for report in reports for r in report["results"]["failed_checks"]]


def unacknowledged(findings: list[tuple[str, str]], acks: list[dict]) -> list[tuple[str, str]]:
    return [
        (check, resource)
        for check, resource in findings
        if not any(a["check"] == check and fnmatch.fnmatchcase(resource, a["object"]) for a in acks)
    ]


@pytest.fixture(scope="module")
def scans(tmp_path_factory, request) -> dict[str, list[tuple[str, str]]]:
    """Every scan at once (the tests run on two cores): per environment its templates and its Kubernetes objects,
    plus one deliberately bad object."""
    from tests.synth import synth

    assert CHECKOV.exists(), "run `make test` (it installs .venv-checkov from the checkov group of pyproject.toml)"
    jobs: dict[str, list[str]] = {}
    for env in ENVIRONMENTS:
        # dev and prod come from the session's synths; any other environment file is synthesized here.
        out = (
            request.getfixturevalue(f"{env}_synth")
            if env in ("dev", "prod")
            else synth(f"config/{env}.yaml", tmp_path_factory.mktemp(env) / "cdk.out")
        )
        templates = [t for p in out.templates for t in ("-f", str(p))]
        jobs[f"{env}:cloudformation"] = command("cloudformation", templates)
        jobs[f"{env}:kubernetes"] = command("kubernetes", ["-d", str(out.outdir / "k8s")])
    bad = tmp_path_factory.mktemp("bad")
    (bad / "deployment.yaml").write_text(yaml.safe_dump(BAD_DEPLOYMENT))
    jobs["bad:kubernetes"] = command("kubernetes", ["-d", str(bad)])
    running = {
        name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in jobs.items()
    }
    results = {}
    for name, proc in running.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1), f"{name}: checkov failed to run: {stderr[-2000:]}"
        results[name] = failed(stdout)
    return results


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("framework", ["cloudformation", "kubernetes"])
def test_checkov_finds_nothing_unacknowledged(scans, env, framework):
    findings = scans[f"{env}:{framework}"]
    left = unacknowledged(findings, acknowledgments())
    assert not left, (
        "unacknowledged checkov findings (fix them or reason them in checkov-acknowledgments.yaml):\n"
        + "\n".join(f"{check} {resource}" for check, resource in left)
    )


def test_every_acknowledgment_is_reasoned_and_used(scans):
    every = [f for name, found in scans.items() if not name.startswith("bad") for f in found]
    for ack in acknowledgments():
        assert set(ack) == {"object", "check", "reason"} and len(ack["reason"]) > 30, ack
        assert any(
            check == ack["check"] and fnmatch.fnmatchcase(resource, ack["object"]) for check, resource in every
        ), f"acknowledgment matches no finding (remove it): {ack}"


def test_the_scan_fails_on_a_bad_object(scans):
    left = {check for check, _ in unacknowledged(scans["bad:kubernetes"], acknowledgments())}
    assert {"CKV_K8S_16", "CKV_K8S_17", "CKV2_K8S_6"} <= left  # privileged, hostPID, no NetworkPolicy


def test_the_alb_controller_acknowledgment_names_every_unconditioned_broad_write(prod_synth):
    """CKV_AWS_111's reason must not claim a tag condition where there is none: every statement of the controller's
    policy that writes on ``*`` or on any security group without a condition is named in it (by Sid or action)."""
    ack = next(a for a in acknowledgments() if a["check"] == "CKV_AWS_111")
    template = prod_synth.template_json(prod_synth.graph.platform)
    policy = next(
        r
        for logical_id, r in template["Resources"].items()
        if fnmatch.fnmatchcase(f"AWS::IAM::Policy.{logical_id}", ack["object"])
    )
    broad = []
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        writes = [a for a in actions if not a.split(":")[1].startswith(("Describe", "List", "Get"))]
        if writes and "Condition" not in statement and ("*" in json.dumps(statement["Resource"])):
            broad.append((statement.get("Sid", ""), writes))
    assert broad, "the controller's policy has unconditioned writes on wildcards"
    for sid, writes in broad:
        if sid in ("TagListeners", "Targets"):  # listener and target-group ARNs of this account: not CKV_AWS_111's
            continue
        assert sid in ack["reason"] or all(a in ack["reason"] for a in writes), (sid, writes)
