"""Node affinity the kvtiers charts share: keeping pods that need no GPU off the HyperPod nodes."""

from __future__ import annotations

from cdk8s_plus_33 import k8s

from kvtiers.k8s_charts.names import HYPERPOD_NODE_SELECTOR


def off_hyperpod(*, required: bool) -> k8s.NodeAffinity:
    """Off the HyperPod nodes: ``required`` (the pod waits for another node) or preferred (it may still land on one
    when no other node has room, which the placement check then counts)."""
    ((key, value),) = HYPERPOD_NODE_SELECTOR.items()
    term = k8s.NodeSelectorTerm(
        match_expressions=[k8s.NodeSelectorRequirement(key=key, operator="NotIn", values=[value])]
    )
    if required:
        return k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.NodeSelector(node_selector_terms=[term])
        )
    return k8s.NodeAffinity(
        preferred_during_scheduling_ignored_during_execution=[k8s.PreferredSchedulingTerm(weight=100, preference=term)]
    )
