"""No secret value in the cloud assembly (templates, assets metadata, the per-object YAML written for review), and
the Hugging Face token reaches only the containers that use it, by Secret reference."""

from __future__ import annotations

import re

import pytest

TOKEN_PATTERNS = {
    "Hugging Face token": re.compile(r"hf_[A-Za-z0-9]{30,}"),
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"),
    "AWS secret key assignment": re.compile(r"aws_secret_access_key\s*[=:]\s*\S{20,}", re.IGNORECASE),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    "bearer token": re.compile(r"Bearer [A-Za-z0-9._-]{20,}"),
}
TEXT_SUFFIXES = {".json", ".yaml", ".yml", ".sh", ".txt", ".py", ".toml"}


def scan(root) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            text = path.read_text(errors="ignore")
            hits += [f"{path.relative_to(root)}: {what}" for what, rx in TOKEN_PATTERNS.items() if rx.search(text)]
    return hits


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_cloud_assembly_has_no_token_like_strings(env_name, request):
    out = request.getfixturevalue(f"{env_name}_synth").outdir
    assert any(out.rglob("*.template.json")) and any((out / "k8s").rglob("*.yaml"))
    assert scan(out) == []


def test_the_scan_finds_a_planted_token(tmp_path):
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "configmap.yaml").write_text("data:\n  token: hf_" + "a1B2" * 9 + "\n")
    assert scan(tmp_path) == ["k8s/configmap.yaml: Hugging Face token"]


def test_hf_token_only_by_secret_reference_and_only_where_used(prod_synth, dev_synth):
    for synth in (dev_synth, prod_synth):
        for objs in synth.graph.workloads.chart_objects.values():
            for o in objs:
                assert o["kind"] != "Secret", "kvtiers renders no Secret: tokens are created out of band"
                if o["kind"] not in ("Deployment", "StatefulSet", "DaemonSet"):
                    continue
                spec = o["spec"]["template"]["spec"]
                for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
                    for e in c.get("env", []):
                        if e["name"] == "HF_TOKEN":
                            assert "value" not in e and "secretKeyRef" in e["valueFrom"], o["metadata"]["name"]
                            assert c["name"] in ("vllm", "router"), (o["metadata"]["name"], c["name"])
