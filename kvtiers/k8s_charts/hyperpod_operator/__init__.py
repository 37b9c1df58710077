"""Operator-managed endpoints: a HyperPod ``InferenceEndpointConfig`` per endpoint (endpoint.py), and the Kyverno
policy that attaches the Curvine L2 to exactly that endpoint's pods at admission (policy.py). What both rely on
from the operator and Kyverno is in contract.py (and docs/operator-contract.md).

Immutable fields: the operator does not let ``intelligentRoutingSpec.enabled`` or the worker environment change
on an existing endpoint. Their fingerprint is part of the object's name (and, in the app, of its manifest's logical
ID), so a change is a new object replacing the old one, never an in-place edit the operator would refuse.
"""

from kvtiers.k8s_charts.hyperpod_operator.endpoint import (
    API_VERSION,
    L2_GUARD_DIR,
    L2_GUARD_VOLUME,
    L2_VOLUME,
    MODEL_MOUNT,
    InferenceEndpointConfigChart,
    OperatorEndpoint,
    unsupported_spec_fields,
)
from kvtiers.k8s_charts.hyperpod_operator.policy import CurvineL2PolicyChart, policy, policy_name

__all__ = [
    "API_VERSION",
    "L2_GUARD_DIR",
    "L2_GUARD_VOLUME",
    "L2_VOLUME",
    "MODEL_MOUNT",
    "CurvineL2PolicyChart",
    "InferenceEndpointConfigChart",
    "OperatorEndpoint",
    "policy",
    "policy_name",
    "unsupported_spec_fields",
]
