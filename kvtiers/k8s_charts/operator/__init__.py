"""Charts of the HyperPod Inference Operator path (``serving: operator`` endpoints)."""

from kvtiers.k8s_charts.operator.endpoint_config import (
    IMMUTABLE_FIELDS,
    InferenceEndpointConfigChart,
    InferenceEndpointConfigProps,
    build_spec,
    immutable_fingerprint,
)
from kvtiers.k8s_charts.operator.curvine_policy import CurvineL2PolicyChart, CurvineL2PolicyProps, build_policy

__all__ = [
    "IMMUTABLE_FIELDS",
    "CurvineL2PolicyChart",
    "CurvineL2PolicyProps",
    "InferenceEndpointConfigChart",
    "InferenceEndpointConfigProps",
    "build_policy",
    "build_spec",
    "immutable_fingerprint",
]
