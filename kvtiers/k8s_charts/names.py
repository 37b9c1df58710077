"""The one home of the names the charts give their objects and the ports, labels and selectors they use: read by
the charts, by the router's pod discovery and by ``kvtiers verify``. Tests build their fakes from rendered objects,
never from these constants."""

PART_OF = "kvtiers"
NAME = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "app.kubernetes.io/instance"
PART_OF_KEY = "app.kubernetes.io/part-of"
ENDPOINT = "kvtiers.io/endpoint"
"""Set on every pod of one serving endpoint; the router discovers exactly the pods with its endpoint's value."""

HYPERPOD_NODE_SELECTOR = {"sagemaker.amazonaws.com/compute-type": "hyperpod"}
"""Label HyperPod puts on its nodes (the system node group has no such label)."""
HYPERPOD_INSTANCE_GROUP = "sagemaker.amazonaws.com/instance-group-name"
"""Label HyperPod puts on each node with its instance group's name."""
GPU_RESOURCE = "nvidia.com/gpu"


def component_labels(name: str, component: str) -> dict[str, str]:
    return {NAME: name, COMPONENT: component, PART_OF_KEY: PART_OF}


# Curvine (the L2): object names and ports.


# Serving: engines, routers and operator endpoints.
