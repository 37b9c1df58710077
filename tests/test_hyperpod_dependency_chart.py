"""The HyperPod dependency chart reaches the deploy graph (issue: a first `cdk deploy` that works, points 3 and 4).

The vendored path runs on a stand-in chart in the layout of a ``make hyperpod-chart`` checkout; the chart values
are rendered by the real Helm that deploys them (the kubectl layer's), and the DaemonSets are checked against the
configured taints with Kubernetes' toleration rules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from kvtiers.config import load_environment
from kvtiers.stacks.hyperpod_chart import DeployGraphError, plan_hyperpod_chart, vendored_chart
from tests.conftest import CONFIG_DIR, ROOT
from tests.fakes.hyperpod_chart import REVISION, write_stand_in_checkout
from tests.synth import synth
from tests.test_config import write_variant

TAINTS = [{"key": "kvtiers.io/gpu", "value": "true", "effect": "NoSchedule"}, {"key": "team", "effect": "NoExecute"}]


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule (``k8s.io/api/core/v1`` ``Toleration.ToleratesTaint``)."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


@pytest.fixture(scope="session")
def helm(tmp_path_factory):
    from tools.layer_helm import extract_helm

    return extract_helm(tmp_path_factory.mktemp("helm") / "helm")


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory):
    return write_stand_in_checkout(tmp_path_factory.mktemp("vendor") / "sagemaker-hyperpod-cli")


@pytest.fixture(scope="session")
def dev_vendored_synth(tmp_path_factory, stand_in):
    return synth("config/dev.yaml", tmp_path_factory.mktemp("dev-vendored") / "cdk.out", nag=True, chart_dir=stand_in)


def helm_chart_resource(result) -> dict:
    resources = result.template_json(result.graph.platform)["Resources"]
    return next(r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart")


# --------------------------------------------------------------------------------------------------- 3: in the graph


def test_pinned_revision_is_the_full_commit_id_of_the_real_commit():
    # aws/sagemaker-hyperpod-cli: 011ca927123e02b35a399935bbb3ab1905fe33c7 exists (2026-06-22, tip of main);
    # the former 011ca9279b96f8d1f2bc8d3fe16b226fd1bbc84d was a short id padded to 40 characters.
    assert load_environment(CONFIG_DIR / "dev.yaml").hyperpod.dependency_chart.revision == REVISION


def test_asset_source_without_the_chart_stops_with_what_to_run(dev_env):
    with pytest.raises(
        DeployGraphError, match="make hyperpod-chart.*dependency_chart.source: external.*kvtiers:review=true"
    ):
        plan_hyperpod_chart(dev_env, None, review=False)


@pytest.mark.skipif((ROOT / "vendor").exists(), reason="a vendored chart is present on this machine")
def test_cdk_synth_without_the_chart_exits_1_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "CDK_CONTEXT_JSON": '{"config": "config/dev.yaml"}',
            "CDK_OUTDIR": str(tmp_path / "out"),
            "PATH": "/usr/bin:/bin",
        },
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "error: config/dev.yaml: the HyperPod dependency chart is not vendored" in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_review_synth_says_so_and_cannot_be_deployed(dev_synth):
    platform = dev_synth.template_json(dev_synth.graph.platform)
    (assertion,) = platform["Rules"]["ReviewOnly"]["Assertions"]
    # Rules may refer only to parameters; the parameter can take no value that satisfies the rule.
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "ReviewOnlySynth"}, "false"]}
    assert platform["Parameters"]["ReviewOnlySynth"]["AllowedValues"] == ["true"]
    assert "make hyperpod-chart" in assertion["AssertDescription"]
    assert not any(r["Type"] == "Custom::AWSCDK-EKS-HelmChart" for r in platform["Resources"].values())


def test_vendored_checkout_at_another_revision_is_rejected(tmp_path):
    write_stand_in_checkout(tmp_path / "cli", revision="0" * 40)
    with pytest.raises(
        DeployGraphError, match=f"is at 0{{40}}, but hyperpod.dependency_chart.revision pins {REVISION}"
    ):
        vendored_chart(tmp_path / "cli", REVISION)


def test_vendored_checkout_without_its_external_subcharts_is_rejected(tmp_path):
    chart = write_stand_in_checkout(tmp_path / "cli")
    for sub in (chart / "charts" / "nvidia-device-plugin").rglob("*"):
        if sub.is_file():
            sub.unlink()
    for sub in sorted((chart / "charts" / "nvidia-device-plugin").rglob("*"), reverse=True):
        sub.rmdir()
    (chart / "charts" / "nvidia-device-plugin").rmdir()
    # Helm refuses a chart whose Chart.yaml dependencies are not all in charts/: the construct that deploys it says so
    # before anything is deployed (the rule is the construct's, so a library user meets it too).
    import aws_cdk as cdk

    from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies

    chart_dir = vendored_chart(tmp_path / "cli", REVISION)
    assert chart_dir is not None
    with pytest.raises(ValueError, match=r"missing from charts/ \(nvidia-device-plugin\).*helm dependency update"):
        HyperPodDependencies(cdk.Stack(), "Deps", cluster=None, chart_dir=chart_dir)


def test_no_checkout_means_no_vendored_chart(tmp_path):
    assert vendored_chart(tmp_path / "absent", REVISION) is None


def test_vendored_path_is_deployed_before_the_hyperpod_cluster_and_is_deployable(dev_vendored_synth):
    platform = dev_vendored_synth.template_json(dev_vendored_synth.graph.platform)
    assert "ReviewOnly" not in platform.get("Rules", {})
    resources = platform["Resources"]
    chart = next(k for k, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart")
    assert resources[chart]["Properties"]["Namespace"] == "kube-system"
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")
    assert chart in cluster["DependsOn"]


def test_vendored_path_passes_cfn_lint(dev_vendored_synth):
    from tests.test_cfn_lint import IGNORED

    command = [
        sys.executable.replace("python", "cfn-lint"),
        "--format",
        "parseable",
        "--regions",
        "us-east-1",
        "--ignore-checks",
        *IGNORED,
        "--",
        *map(str, dev_vendored_synth.templates),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "", run.stdout + run.stderr


def test_vendored_path_passes_cdk_nag(dev_vendored_synth):
    # The fixture synthesized with the AwsSolutions plugin, which raises on any unacknowledged finding.
    report = json.loads((dev_vendored_synth.outdir / "validation-report.json").read_text())
    plugins = {p["pluginName"]: p for p in report["pluginReports"]}
    assert "AwsSolutions" not in plugins or plugins["AwsSolutions"]["conclusion"] == "success"


def test_external_source_deploys_in_two_stages(tmp_path):
    path = write_variant(tmp_path, lambda raw: raw["hyperpod"].update(dependency_chart={"source": "external"}))
    first = synth(path, tmp_path / "eks", eks_only=True)
    assert first.graph.workloads is None
    types = {r["Type"] for r in first.template_json(first.graph.platform)["Resources"].values()}
    assert "AWS::EKS::Cluster" in types and "AWS::SageMaker::Cluster" not in types
    second = synth(path, tmp_path / "all")
    platform = second.template_json(second.graph.platform)
    assert "ReviewOnly" not in platform.get("Rules", {})
    types = {r["Type"] for r in platform["Resources"].values()}
    assert "AWS::SageMaker::Cluster" in types and "Custom::AWSCDK-EKS-HelmChart" not in types
    # The same EKS resources in both stages: the second deploy updates the first, it does not replace it.
    eks_ids = lambda t: {k for k, r in t["Resources"].items() if r["Type"].startswith("AWS::EKS::")}
    assert eks_ids(first.template_json(first.graph.platform)) <= eks_ids(platform)


def test_eks_stage_is_refused_for_the_asset_source(dev_env, tmp_path):
    with pytest.raises(DeployGraphError, match="source: external only"):
        synth("config/dev.yaml", tmp_path / "out", eks_only=True)


def test_make_hyperpod_chart_fails_clearly_on_a_missing_commit(tmp_path):
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "-C", str(upstream)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    missing = "011ca9279b96f8d1f2bc8d3fe16b226fd1bbc84d"
    run = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "hyperpod-chart-checkout",
            f"HYPERPOD_CLI_REPO={upstream}",
            f"HYPERPOD_CLI_REV={missing}",
            f"HYPERPOD_CLI_DIR={tmp_path / 'vendor'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert f"commit {missing} does not exist in {upstream}" in run.stderr
    assert not (tmp_path / "vendor").exists()


# --------------------------------------------------------------------------------------------------- 4: tolerations


@pytest.fixture(scope="session")
def tainted_vendored_synth(tmp_path_factory, stand_in):
    def taint(raw):
        group = raw["hyperpod"]["instance_groups"][0]
        group.update(taints=TAINTS, deep_health_checks=[])

    path = write_variant(tmp_path_factory.mktemp("tainted"), taint)
    return synth(path, tmp_path_factory.mktemp("tainted-out") / "cdk.out", chart_dir=stand_in)


def rendered_daemonsets(helm, chart, values: dict, tmp_path) -> dict[str, dict]:
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    out = subprocess.run(
        [str(helm), "template", "deps", str(chart), "-f", str(values_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d["kind"] == "DaemonSet"}


def test_every_gpu_node_agent_tolerates_every_configured_taint(tainted_vendored_synth, helm, stand_in, tmp_path):
    values = json.loads(helm_chart_resource(tainted_vendored_synth)["Properties"]["Values"])
    daemonsets = rendered_daemonsets(helm, stand_in, values, tmp_path)
    assert set(daemonsets) == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin", "health-monitoring-agent"}
    for name, daemonset in daemonsets.items():
        tolerations = daemonset["spec"]["template"]["spec"]["tolerations"]
        for taint in TAINTS:
            taint = {"value": "", **taint}
            assert any(tolerates(t, taint) for t in tolerations), (name, taint)


def test_device_plugins_keep_their_default_tolerations(tainted_vendored_synth):
    values = json.loads(helm_chart_resource(tainted_vendored_synth)["Properties"]["Values"])
    health = {"key": "sagemaker.amazonaws.com/node-health-status", "value": "Unschedulable", "effect": "NoSchedule"}
    gpu = {"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"}
    assert any(tolerates(t, gpu) for t in values["nvidia-device-plugin"]["tolerations"])
    for subchart in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        assert any(tolerates(t, health) for t in values[subchart]["tolerations"]), subchart


def test_without_custom_taints_the_chart_defaults_are_untouched(dev_vendored_synth):
    values = json.loads(helm_chart_resource(dev_vendored_synth)["Properties"]["Values"])
    assert set(values) == {"health-monitoring-agent", "global"}
    assert values["global"]["region"] == "us-east-1"


def test_chart_waits_for_a_node_with_pod_networking(dev_vendored_synth):
    resources = dev_vendored_synth.template_json(dev_vendored_synth.graph.platform)["Resources"]
    chart = helm_chart_resource(dev_vendored_synth)
    depends = set(chart.get("DependsOn", []))
    kinds = {resources[d]["Type"] for d in depends}
    assert "AWS::EKS::Nodegroup" in kinds
    addons = {resources[d]["Properties"]["AddonName"] for d in depends if resources[d]["Type"] == "AWS::EKS::Addon"}
    assert {"vpc-cni", "kube-proxy"} <= addons
    assert chart["Properties"]["Wait"] is True


def test_without_system_nodes_the_chart_does_not_wait_for_pods(tmp_path, stand_in):
    path = write_variant(tmp_path, lambda raw: raw["eks"].update(system_nodegroup={"enabled": False}))
    result = synth(path, tmp_path / "out", chart_dir=stand_in)
    properties = helm_chart_resource(result)["Properties"]
    # HyperPod creates its nodes only after the chart: waiting for the chart's controllers would never end.
    assert not properties.get("Wait") and not properties.get("Atomic")


def _layouts(root) -> dict:
    """The stand-in chart with its first dependency resolved four ways, as a ``helm dependency update`` may leave it
    or a hand-made copy might: a directory, an archive, a directory of another name holding the chart, nothing."""
    import shutil
    import tarfile

    layouts = {}
    for layout in ("directory", "archive", "renamed-directory", "missing"):
        chart = write_stand_in_checkout(root / layout / "cli")
        sub = chart / "charts" / "nvidia-device-plugin"
        if layout == "archive":
            with tarfile.open(chart / "charts" / "nvidia-device-plugin-0.1.0.tgz", "w:gz") as archive:
                archive.add(sub, arcname="nvidia-device-plugin")
            shutil.rmtree(sub)
        elif layout == "renamed-directory":
            sub.rename(chart / "charts" / "plugin")
        elif layout == "missing":
            shutil.rmtree(sub)
        layouts[layout] = chart
    return layouts


def test_the_unresolved_chart_check_agrees_with_the_layers_own_helm(helm, tmp_path):
    """Helm loads the subcharts in charts/ (directories and archives) and matches each dependency by the name in the
    subchart's own Chart.yaml (``checkDependencies``); the construct refuses exactly the layouts Helm refuses."""
    import aws_cdk as cdk
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk import aws_iam as iam

    from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies

    def imported_cluster(stack: cdk.Stack) -> eks.ICluster:
        return eks.Cluster.from_cluster_attributes(
            stack,
            "Cluster",
            cluster_name="c",
            kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
                stack,
                "Kubectl",
                service_token="arn:aws:lambda:us-east-1:111111111111:function:kubectl",
                role=iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/kubectl"),
            ),
        )

    for layout, chart in _layouts(tmp_path).items():
        run = subprocess.run([str(helm), "template", "deps", str(chart)], capture_output=True, text=True)
        helm_refuses = run.returncode != 0 and "missing in charts/ directory" in run.stderr
        assert helm_refuses == (layout == "missing"), (layout, run.stderr[-500:])
        stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="111111111111", region="us-east-1"))
        try:
            HyperPodDependencies(stack, "Deps", cluster=imported_cluster(stack), chart_dir=chart)
            refused = False
        except ValueError as error:
            refused = "missing from charts/ (nvidia-device-plugin)" in str(error)
        assert refused == helm_refuses, layout
