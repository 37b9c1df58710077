"""The peers a construct's NetworkPolicies name (the Kubernetes API, its pod proxy, the nodes), from the network and
the EKS cluster as built: one derivation for the L2's policies and the endpoints'."""

from __future__ import annotations

import ipaddress

from kvtiers.checks import unresolved
from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.k8s_charts.network_policies import ClusterNetwork


def cluster_network(
    where: str,
    network: HyperPodNetwork | ClusterNetwork | None,
    eks_cluster: EksCluster | ClusterLike,
    *,
    otherwise: str = "or give a ClusterNetwork",
) -> ClusterNetwork:
    """``network`` as the policies' peers: a :class:`ClusterNetwork` as given, or the :class:`HyperPodNetwork`'s VPC
    and EKS subnets with the ``kubernetes`` Service address of ``EksCluster(service_ipv4_cidr=)``."""
    if isinstance(network, ClusterNetwork):
        return network
    if network is None:
        raise ValueError(
            f"{where}: network is required for its NetworkPolicies: give network=HyperPodNetwork(...) (or a "
            "ClusterNetwork), or network_policies=False if you deploy equivalent policies yourself"
        )
    service_cidr = eks_cluster.service_ipv4_cidr if isinstance(eks_cluster, EksCluster) else None
    if service_cidr is None:
        raise ValueError(
            f"{where}: network=HyperPodNetwork needs the EksCluster construct built with service_ipv4_cidr= (the "
            f"'kubernetes' Service address the policies admit; EKS's own pick is not known at synth), {otherwise}"
        )
    if unresolved(network.cidr):
        raise ValueError(f"{where}: the network's cidr is a deploy-time value; {otherwise}")
    return ClusterNetwork(
        node_cidr=network.cidr,
        api_service_ip=str(ipaddress.IPv4Network(service_cidr).network_address + 1),
        control_plane_cidrs=network.control_plane_cidrs,
        load_balancer_cidrs=load_balancer_cidrs(network),
    )


def load_balancer_cidrs(network: HyperPodNetwork) -> tuple[str, ...]:
    """Where the Inference Operator's internal ALB can have its addresses: the network's
    ``load_balancer_subnet_cidrs`` (a new VPC's EKS and HyperPod subnets, an imported VPC's as given). () when they
    are not given or not known at synth: the policies then admit the whole VPC."""
    cidrs = network.load_balancer_subnet_cidrs
    return () if any(unresolved(c) for c in cidrs) else cidrs
