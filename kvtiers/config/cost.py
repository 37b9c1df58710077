"""What an environment costs per hour at on-demand list prices (us-east-1, USD), from one dated price table.

The prices were collected on 2026-12-03 without an AWS account, from the sources each :class:`Price` names; several
are transcriptions of AWS's Price List API rather than AWS pages, and SageMaker HyperPod's own rates for ml.g6e were
not found: the SageMaker Training list prices stand in for them. Confirm before you budget with
``aws pricing get-products --service-code AmazonSageMaker --region us-east-1`` (HyperPod cluster usage) and the EC2,
EKS, VPC and EBS pricing pages. Usage-priced items (data through the NAT gateways, Prometheus samples) are not
hourly and are left out; the table says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from kvtiers.catalog.kubernetes import Support, support
from kvtiers.config.schema import Environment, NewVpc

HOURS_PER_MONTH = 730
"""AWS's convention for turning a monthly price into an hourly one."""


@dataclass(frozen=True, kw_only=True)
class Price:
    usd: float
    unit: str
    source: str


PRICES_COLLECTED = date(2026, 12, 3)

SAGEMAKER_TRAINING_SOURCE = (
    "SageMaker Training on-demand list prices as transcribed from the AWS Price List API in public code (stand-in "
    "for HyperPod's ml.g6e rates, which were not found; the 48xlarge figure is us-west-2's)"
)
HYPERPOD_INSTANCE = {
    "ml.g6e.2xlarge": Price(usd=2.80, unit="instance-hour", source=SAGEMAKER_TRAINING_SOURCE),
    "ml.g6e.12xlarge": Price(usd=13.12, unit="instance-hour", source=SAGEMAKER_TRAINING_SOURCE),
    "ml.g6e.48xlarge": Price(usd=37.66, unit="instance-hour", source=SAGEMAKER_TRAINING_SOURCE),
}
M7I_SOURCE = (
    "EC2 on-demand, four times m7i.large's $0.1008 (doit.com, 'AWS EC2 pricing'); m7i scales linearly with size"
)
EC2_INSTANCE = {
    "m7i.large": Price(usd=0.1008, unit="instance-hour", source=M7I_SOURCE),
    "m7i.xlarge": Price(usd=0.2016, unit="instance-hour", source=M7I_SOURCE),
    "m7i.2xlarge": Price(usd=0.4032, unit="instance-hour", source=M7I_SOURCE),
}
EKS_SOURCE = "AWS Containers blog, 'Amazon EKS extended support for Kubernetes versions pricing' (from 2024-04-01)"
EKS_CONTROL_PLANE = {
    Support.STANDARD: Price(usd=0.10, unit="cluster-hour", source=EKS_SOURCE),
    Support.EXTENDED: Price(usd=0.60, unit="cluster-hour", source=EKS_SOURCE),
}
NAT_GATEWAY = Price(
    usd=0.045, unit="gateway-hour", source="aws.amazon.com/vpc/pricing (read 2026-09-20); plus $0.045/GB"
)
GP3_STORAGE = Price(usd=0.08 / HOURS_PER_MONTH, unit="GB-hour", source="EBS gp3 $0.08 per GB-month (us-east-1)")
GP3_EXTRA_IOPS = Price(usd=0.005 / HOURS_PER_MONTH, unit="IOPS-hour", source="EBS gp3 $0.005 per IOPS-month over 3,000")
GP3_BASELINE_IOPS = 3000
PROMETHEUS_COLLECTOR = Price(
    usd=0.04, unit="collector-hour", source="Amazon Managed Service for Prometheus managed collector (Price List API)"
)


@dataclass(frozen=True, kw_only=True)
class CostLine:
    item: str
    quantity: str
    usd_per_hour: float


@dataclass(frozen=True, kw_only=True)
class CostEstimate:
    environment: str
    lines: tuple[CostLine, ...]

    @property
    def usd_per_hour(self) -> float:
        return sum(line.usd_per_hour for line in self.lines)


def _price(table: dict[str, Price], instance_type: str, what: str) -> Price:
    try:
        return table[instance_type]
    except KeyError:
        raise ValueError(f"no list price for {what} {instance_type}; known: {', '.join(sorted(table))}") from None


def hourly_cost(env: Environment, *, on: date) -> CostEstimate:
    """The environment's hourly cost at list prices on the day ``on`` (which decides the EKS support tier)."""
    counts: dict[str, int] = {}
    for group in env.hyperpod.instance_groups:
        counts[group.instance_type] = counts.get(group.instance_type, 0) + group.count
    lines = [
        CostLine(
            item=f"HyperPod {instance_type}",
            quantity=f"{count}",
            usd_per_hour=count * _price(HYPERPOD_INSTANCE, instance_type, "HyperPod instance").usd,
        )
        for instance_type, count in sorted(counts.items())
    ]
    system = env.eks.system_nodegroup
    lines.append(
        CostLine(
            item=f"EKS system nodes {system.instance_type}",
            quantity=f"{system.desired_size}",
            usd_per_hour=system.desired_size * _price(EC2_INSTANCE, system.instance_type, "EC2 instance").usd,
        )
    )
    tier = support(env.eks.kubernetes_version, on)
    lines.append(
        CostLine(
            item=f"EKS control plane ({tier.value})",
            quantity="1",
            usd_per_hour=EKS_CONTROL_PLANE.get(tier, EKS_CONTROL_PLANE[Support.EXTENDED]).usd,
        )
    )
    if isinstance(env.network, NewVpc):  # an existing VPC's gateways are its owner's
        lines.append(
            CostLine(
                item="NAT gateways (data processed extra)",
                quantity=f"{env.network.nat_gateways}",
                usd_per_hour=env.network.nat_gateways * NAT_GATEWAY.usd,
            )
        )
    lines.append(_ebs_line(env))
    if env.observability.enabled:
        lines.append(
            CostLine(
                item="Prometheus managed collector (samples extra)", quantity="1", usd_per_hour=PROMETHEUS_COLLECTOR.usd
            )
        )
    return CostEstimate(environment=env.name, lines=tuple(lines))


def _ebs_line(env: Environment) -> CostLine:
    node_gb = sum(group.count * group.ebs_volume_gb for group in env.hyperpod.instance_groups)
    master = env.curvine.master
    journal_gb = master.replicas * (master.meta_volume_gib + master.journal_volume_gib)
    extra_iops = master.replicas * 2 * max(0, master.volume_iops - GP3_BASELINE_IOPS)
    return CostLine(
        item="EBS gp3: HyperPod node volumes and Curvine master volumes",
        quantity=f"{node_gb + journal_gb} GB",
        usd_per_hour=(node_gb + journal_gb) * GP3_STORAGE.usd + extra_iops * GP3_EXTRA_IOPS.usd,
    )


ITEM_ORDER = ("HyperPod", "EKS system", "EKS control", "NAT", "EBS", "Prometheus")


def markdown_table(estimates: tuple[CostEstimate, ...]) -> str:
    """One column per environment, one row per item; the README's cost table."""
    items: list[str] = []
    for estimate in estimates:
        items += [line.item for line in estimate.lines if line.item not in items]
    items.sort(key=lambda item: (next(i for i, kind in enumerate(ITEM_ORDER) if item.startswith(kind)), item))
    header = "| item | " + " | ".join(e.environment for e in estimates) + " |"
    rule = "| --- |" + " ---: |" * len(estimates)
    rows = [header, rule]
    for item in items:
        cells = []
        for estimate in estimates:
            line = next((entry for entry in estimate.lines if entry.item == item), None)
            cells.append(f"{line.quantity}: ${line.usd_per_hour:,.2f}" if line else "")
        rows.append(f"| {item} | " + " | ".join(cells) + " |")
    rows.append("| **total per hour** | " + " | ".join(f"**${e.usd_per_hour:,.2f}**" for e in estimates) + " |")
    return "\n".join(rows)
