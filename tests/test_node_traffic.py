"""The synthesized security-group rules against docs/security.md's hand-written node traffic matrix.

A small evaluator: each node kind carries a set of security groups (the control plane's ENIs: the EKS cluster group
and the project group, which the cluster takes as its additional group; system nodes: the EKS cluster group, as
managed node groups do; HyperPod nodes: the project group). Traffic from A to B on a port is allowed when an ingress
rule of one of B's groups names one of A's groups as source and covers the protocol and port; both groups allow all
egress. The EKS-created cluster group's own rule (all traffic from itself) is not in any template: EKS adds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT

PROJECT, CLUSTER, SCRAPER = "project", "cluster", "scraper"
MEMBERS = {"control-plane": {CLUSTER, PROJECT}, "system": {CLUSTER}, "hyperpod": {PROJECT}, "scraper": {SCRAPER}}


@dataclass(frozen=True)
class Rule:
    group: str
    source: str
    protocol: str
    first: int
    last: int

    def covers(self, protocol: str, port: int | None) -> bool:
        if self.protocol == "-1":
            return True
        return protocol == self.protocol and port is not None and self.first <= port <= self.last


def group_of(reference) -> str:
    text = str(reference)
    if "ClusterSecurityGroupId" in text:
        return CLUSTER
    if "NetworkSecurityGroup" in text:
        return PROJECT
    if "ScraperSecurityGroup" in text:
        return SCRAPER
    raise AssertionError(f"unknown security group reference {reference}")


def synthesized_rules(result) -> list[Rule]:
    rules = [Rule(CLUSTER, CLUSTER, "-1", 0, 65535)]  # EKS's own rule on the cluster security group
    for stack in result.graph.stacks:
        for resource in result.template_json(stack)["Resources"].values():
            if resource["Type"] != "AWS::EC2::SecurityGroupIngress":
                continue
            p = resource["Properties"]
            assert "CidrIp" not in p, f"a CIDR-based node rule: {p}"
            rules.append(
                Rule(
                    group_of(p["GroupId"]),
                    group_of(p["SourceSecurityGroupId"]),
                    str(p["IpProtocol"]),
                    int(p.get("FromPort", 0)),
                    int(p.get("ToPort", 65535)),
                )
            )
    return rules


def allowed(rules: list[Rule], source: str, target: str, protocol: str, port: int | None) -> bool:
    return any(r.group in MEMBERS[target] and r.source in MEMBERS[source] and r.covers(protocol, port) for r in rules)


def matrix() -> list[dict]:
    text = (ROOT / "docs" / "security.md").read_text()
    table = text.split("<!-- node-traffic-matrix -->")[1].split("<!-- /node-traffic-matrix -->")[0]
    rows = [line.strip().strip("|").split("|") for line in table.strip().splitlines()[2:]]
    parsed = []
    for cells in rows:
        source, target, traffic, dev, prod, why = (c.strip() for c in cells)
        match = re.fullmatch(r"(tcp|udp) (\d+)|all", traffic)
        assert match, traffic
        parsed.append(
            {
                "source": source,
                "target": target,
                "protocol": match.group(1) or "all",
                "port": int(match.group(2)) if match.group(2) else None,
                "dev": dev,
                "prod": prod,
                "why": why,
            }
        )
    return parsed


ROWS = matrix()


def test_the_matrix_is_written_down():
    assert len(ROWS) >= 20 and all(row["why"] for row in ROWS)


@pytest.mark.parametrize("environment", ["dev", "prod"])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['source']}->{r['target']}:{r['protocol']}{r['port'] or ''}")
def test_synthesized_rules_match_the_matrix(request, environment, row):
    rules = synthesized_rules(request.getfixturevalue(f"{environment}_synth"))
    if row["protocol"] == "all":
        probes = [("tcp", 22), ("tcp", 8997), ("udp", 53), ("tcp", 61000)]
        result = all(allowed(rules, row["source"], row["target"], p, port) for p, port in probes)
    else:
        result = allowed(rules, row["source"], row["target"], row["protocol"], row["port"])
    assert ("allowed" if result else "denied") == row[environment], row["why"]


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_every_cross_kind_rule_is_in_the_matrix(request, environment):
    """No port is open between system and HyperPod nodes that the matrix does not list as allowed."""
    rules = synthesized_rules(request.getfixturevalue(f"{environment}_synth"))
    listed = {(r["source"], r["target"], r["protocol"], r["port"]) for r in ROWS if r[environment] == "allowed"}
    for rule in rules:
        if {rule.group, rule.source} != {PROJECT, CLUSTER}:
            continue
        source = "system" if rule.source == CLUSTER else "hyperpod"
        target = "hyperpod" if source == "system" else "system"
        for port in (rule.first, rule.last):
            assert (source, target, rule.protocol, port) in listed, rule
    for rule in rules:
        if rule.source == SCRAPER:  # the metrics collector: each port it may reach is a row
            targets = {kind for kind, groups in MEMBERS.items() if rule.group in groups and kind != "scraper"}
            for port in (rule.first, rule.last):
                assert any((SCRAPER, t, rule.protocol, port) in listed for t in targets), rule


def test_the_evaluator_denies_without_rules():
    assert not allowed([Rule(CLUSTER, CLUSTER, "-1", 0, 65535)], "system", "hyperpod", "tcp", 8000)
    assert allowed([Rule(PROJECT, CLUSTER, "tcp", 8000, 8000)], "system", "hyperpod", "tcp", 8000)
    assert not allowed([Rule(PROJECT, CLUSTER, "tcp", 8000, 8000)], "hyperpod", "system", "tcp", 8000)


def test_coredns_is_pinned_to_the_system_nodes(dev_synth):
    """The matrix opens port 53 only towards system nodes, so CoreDNS must never run on a HyperPod node."""
    import json

    resources = dev_synth.template_json(dev_synth.graph.platform)["Resources"]
    coredns = next(
        r for r in resources.values() if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "coredns"
    )
    config = json.loads(coredns["Properties"]["ConfigurationValues"])
    (term,) = config["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    nodegroup = next(r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup")
    assert term["matchExpressions"] == [
        {"key": k, "operator": "In", "values": [v]} for k, v in nodegroup["Properties"]["Labels"].items()
    ]
