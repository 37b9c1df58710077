"""The placement model on its own (no CDK): what a G6e node offers, checked against an independent published table,
and the fullest node of a group for each resource, each refusal caused by one resource alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtiers.catalog.instance_types import G6E_INSTANCE_TYPES
from kvtiers.node_agents import OPERATOR_CONTROLLERS, GroupFacts, kubelet_reserve
from kvtiers.placement import NodePlacement, Workload, node_offer, pod

KARPENTER_ALLOCATABLE = {
    # aws/karpenter-provider-aws website/content/en/preview/reference/instance-types.md (1d927085): the allocatable
    # CPU (millicores), memory (MiB) and pods Karpenter lists for each EC2 g6e size on the EKS-optimized AL2023 AMI.
    "ml.g6e.xlarge": (3920, 29317, 58),
    "ml.g6e.2xlarge": (7910, 59627, 58),
    "ml.g6e.4xlarge": (15890, 118312, 234),
    "ml.g6e.8xlarge": (31850, 239554, 234),
    "ml.g6e.12xlarge": (47810, 360157, 292),
    "ml.g6e.16xlarge": (63770, 476504, 737),
    "ml.g6e.24xlarge": (95690, 721682, 492),
    "ml.g6e.48xlarge": (191450, 1449132, 492),
}


def offer(instance_type: str = "ml.g6e.12xlarge", *, count: int = 2, threads_per_core: int = 2, **kw):
    instance = G6E_INSTANCE_TYPES[instance_type]
    return node_offer(
        group="g",
        instance=instance,
        count=count,
        threads_per_core=threads_per_core,
        tiered_storage_percentage=kw.pop("tiered_storage_percentage", 0),
        system_reserved_gib=kw.pop("system_reserved_gib", 0),
        kubelet_disk_gb=kw.pop("kubelet_disk_gb", 500),
        reserve=kubelet_reserve(instance, threads_per_core=threads_per_core),
    )


@pytest.mark.parametrize("instance_type", sorted(KARPENTER_ALLOCATABLE))
def test_a_nodes_allocatable_cpu_memory_and_pods_equal_karpenters_table(instance_type):
    allocatable = offer(instance_type).allocatable
    assert (allocatable.cpu_millis, allocatable.memory_mib, allocatable.pods) == KARPENTER_ALLOCATABLE[instance_type]


def test_one_thread_per_core_halves_the_cpus_a_node_offers():
    assert offer(threads_per_core=1).capacity.cpu_millis == 24000
    assert offer(threads_per_core=2).capacity.cpu_millis == 48000


def test_tiered_storage_and_the_system_reserve_come_out_of_memory():
    plain = offer().allocatable.memory_mib
    assert offer(tiered_storage_percentage=20).allocatable.memory_mib == plain - 384 * 1024 // 5
    assert offer(system_reserved_gib=2).allocatable.memory_mib == plain - 2048


def test_without_an_ebs_volume_the_kubelets_disk_is_the_nvme_curvine_caches_on():
    on_ebs = NodePlacement([offer(kubelet_disk_gb=500)])
    on_nvme = NodePlacement([offer(kubelet_disk_gb=0)])
    for placement in (on_ebs, on_nvme):
        placement.add(daemon("curvine-worker", nvme_gb=3300))
        placement.add(engines("e", replicas=2, gpus=1, disk_gib=150))
    assert not on_ebs.problems()
    (problem,) = on_nvme.problems()
    assert "instance-store NVMe" in problem and "curvine-worker 3300 GB" in problem and "e x2 324 GB" in problem


def daemon(name: str, **resources) -> Workload:
    return Workload(name=name, groups=("g",), spread="every_node", pod=pod(**resources))


def engines(name: str, *, replicas: int, gpus: int, **resources) -> Workload:
    return Workload(name=name, groups=("g",), spread="gpu_bound", replicas=replicas, pod=pod(gpus=gpus, **resources))


def fitting() -> list[Workload]:
    """A group of two ml.g6e.12xlarge that fits in every resource, with room in each."""
    return [
        daemon("agent", cpu_millis=1000, memory_mib=1024),
        daemon("curvine-worker", cpu_millis=4000, memory_mib=8192, nvme_gb=1020),
        engines("qwen", replicas=2, gpus=2, cpu_millis=16000, memory_mib=100 * 1024, disk_gib=100),
    ]


def problems(workloads: list[Workload], **offered) -> list[str]:
    placement = NodePlacement([offer(**offered)])
    for workload in workloads:
        placement.add(workload)
    return placement.problems()


def test_the_fitting_group_fits():
    assert problems(fitting()) == []


@pytest.mark.parametrize(
    ("change", "resource", "asked", "offered"),
    [
        # Two qwen pods share a node (its 4 GPUs): 2 x 22 + 5 CPUs.
        (
            lambda w: w.__setitem__(2, engines("qwen", replicas=2, gpus=2, cpu_millis=22000)),
            "cpu",
            "49 CPU",
            "47.81 CPU",
        ),
        (lambda w: w.append(daemon("big", memory_mib=150 * 1024)), "memory", "359.0 GiB", "351.7 GiB"),
        (lambda w: w.extend(daemon(f"d{i}") for i in range(289)), "pods", "293", "292"),
        (
            lambda w: w.__setitem__(1, daemon("curvine-worker", nvme_gb=3900)),
            "instance-store NVMe",
            "3900 GB",
            "3800 GB",
        ),
        (
            lambda w: w.__setitem__(2, engines("qwen", replicas=2, gpus=2, disk_gib=300)),
            "kubelet disk",
            "600 GiB",
            "417 GiB",
        ),
    ],
    ids=["cpu", "memory", "pods", "nvme", "disk"],
)
def test_each_resource_alone_over_budget_is_one_problem_naming_it(change, resource, asked, offered):
    workloads = fitting()
    change(workloads)
    (problem,) = problems(workloads)
    assert problem.startswith("instance group 'g' (2 x ml.g6e.12xlarge, threads_per_core 2): " + resource + ":")
    assert f"asks {asked}" in problem and f"offers {offered}" in problem


def test_gpus_alone_over_budget_is_one_problem_naming_every_gpu_pod():
    (problem,) = problems([*fitting(), engines("llama", replicas=3, gpus=2)])
    assert "gpus: the GPU pods (qwen 2 x 2, llama 3 x 2) ask 10 GPUs of 8 and cannot all be placed" in problem


def test_gpu_pods_that_only_fit_apart_are_placed_apart():
    # Two 4-GPU pods and two 2-GPU pods on two 4-GPU nodes: 12 GPUs asked of 8.
    assert any("gpus" in p for p in problems([engines("a", replicas=2, gpus=4), engines("b", replicas=2, gpus=2)]))
    # One 4-GPU pod and two 2-GPU pods fill both nodes exactly.
    assert problems([engines("a", replicas=1, gpus=4), engines("b", replicas=2, gpus=2)]) == []


def test_the_fullest_node_is_the_mix_of_gpu_pods_that_asks_most():
    placement = NodePlacement([offer()])
    placement.add(engines("few-cpus-per-gpu", replicas=4, gpus=1, cpu_millis=2000, memory_mib=100 * 1024))
    placement.add(engines("many-cpus-per-gpu", replicas=3, gpus=2, cpu_millis=16000, memory_mib=10 * 1024))
    use = {f.resource.label: f for f in placement.use("g").fullest}
    # CPU: two 2-GPU pods (32) beat one of them and two 1-GPU pods (20).
    assert use["cpu"].asked == 32000
    # Memory: four 1-GPU pods (400 GiB) beat any mix with a 2-GPU pod.
    assert use["memory"].asked == 400 * 1024


def test_a_gpu_pod_is_counted_no_more_often_than_its_replicas():
    placement = NodePlacement([offer()])
    placement.add(engines("one", replicas=1, gpus=1, cpu_millis=10000))
    cpu = next(f for f in placement.use("g").fullest if f.resource.label == "cpu")
    assert cpu.asked == 10000


def test_more_masters_than_nodes_is_refused_naming_the_spread():
    placement = NodePlacement([offer(count=2)])
    placement.add(Workload(name="masters", groups=("g",), spread="one_per_node", replicas=3, pod=pod(cpu_millis=1)))
    (problem,) = placement.problems()
    assert "masters: 3 replicas need 3 nodes" in problem and "anti-affinity" in problem and "have 2" in problem


def test_a_workload_on_a_group_the_cluster_does_not_have_is_refused():
    placement = NodePlacement([offer()])
    with pytest.raises(ValueError, match="instance group\\(s\\) other are not HyperPod groups"):
        placement.add(Workload(name="x", groups=("other",), spread="every_node", pod=pod()))


def test_one_workload_registered_twice_counts_once_and_differently_is_refused():
    placement = NodePlacement([offer()])
    placement.add(daemon("agent", cpu_millis=10))
    placement.add(daemon("agent", cpu_millis=10))
    assert next(f for f in placement.use("g").fullest if f.resource.label == "pods").asked == 1
    with pytest.raises(ValueError, match="registered twice with different pods"):
        placement.add(daemon("agent", cpu_millis=20))


def test_a_group_of_an_unknown_instance_type_takes_workloads_and_is_not_checked():
    placement = NodePlacement([], unchecked_groups=("p5",))
    placement.add(Workload(name="x", groups=("p5",), spread="one_per_node", replicas=9, pod=pod(gpus=8)))
    assert placement.problems() == []


def spread(name: str, replicas: int, gpus: int) -> Workload:
    return Workload(
        name=name, groups=("g",), spread="gpu_bound", replicas=replicas, pod=pod(gpus=gpus), spread_evenly=True
    )


def test_spread_engines_of_two_endpoints_that_fit_only_unevenly_are_refused():
    """Two 8-GPU nodes: A (one 8-GPU pod) fills one; B's two 4-GPU pods would both need the other, which its spread
    (at most one more than on any other node) forbids: B's second pod stays Pending."""
    workloads = [spread("a", 1, 8), spread("b", 2, 4)]
    (problem,) = problems(workloads, instance_type="ml.g6e.48xlarge")
    assert "gpus: the GPU pods (a 1 x 8 spread evenly, b 2 x 4 spread evenly) ask 16 GPUs of 16" in problem
    assert "cannot all be placed" in problem
    unspread = [replace(w, spread_evenly=False) for w in workloads]
    assert problems(unspread, instance_type="ml.g6e.48xlarge") == []


def test_a_spread_endpoint_puts_its_floor_on_every_node_before_anything_else():
    """Three 8-GPU nodes: the 4-GPU endpoint's four pods put one on every node (and one more on one), so no node has
    the 8 GPUs of the other endpoint's pod left, although 24 GPUs hold 24 asked."""
    (problem,) = problems([spread("a", 1, 8), spread("b", 4, 4)], instance_type="ml.g6e.48xlarge", count=3)
    assert "cannot all be placed" in problem


def test_spread_endpoints_that_fit_as_the_scheduler_spreads_them_are_accepted():
    """Four 8-GPU nodes: A 2 x 4, B 5 x 2 (one on every node and one more), C 3 x 1: every order places them all."""
    workloads = [spread("a", 2, 4), spread("b", 5, 2), spread("c", 3, 1)]
    placement = NodePlacement([offer("ml.g6e.48xlarge", count=4)])
    for w in workloads:
        placement.add(w)
    assert placement.problems() == [] and placement.warnings() == []
    assert placement.use("g").gpus_idle == 32 - 21


def test_pods_that_fit_only_in_some_scheduling_orders_are_a_warning():
    """Two 8-GPU nodes: A 1 x 8, B 1 x 4 and C 1 x 4 fit (A alone, B and C together), but B and C placed first on
    two nodes leave A Pending."""
    placement = NodePlacement([offer("ml.g6e.48xlarge", count=2)])
    for w in (spread("a", 1, 8), spread("b", 1, 4), spread("c", 1, 4)):
        placement.add(w)
    assert placement.problems() == []
    (warning,) = placement.warnings()
    assert "not in every order the scheduler may take them" in warning


def test_a_pod_larger_than_any_node_is_refused_naming_both_sizes():
    (problem,) = problems([spread("big", 1, 8)])
    assert "big asks 8 GPUs a pod, a node has 4" in problem


def test_an_operator_endpoint_may_use_every_group_of_its_instance_type():
    one_each = [
        node_offer(
            group=name,
            instance=G6E_INSTANCE_TYPES["ml.g6e.2xlarge"],
            count=1,
            threads_per_core=2,
            tiered_storage_percentage=0,
            system_reserved_gib=0,
            kubelet_disk_gb=100,
            reserve=kubelet_reserve(G6E_INSTANCE_TYPES["ml.g6e.2xlarge"], threads_per_core=2),
        )
        for name in ("a", "b")
    ]
    placement = NodePlacement(one_each)
    placement.add(Workload(name="op", groups=("a", "b"), spread="gpu_bound", replicas=2, pod=pod(gpus=1)))
    assert placement.problems() == []
    assert placement.use("a").gpus_idle == 0 and placement.use("b").gpus_idle == 0


def test_every_replica_of_a_pod_that_may_land_anywhere_counts_on_the_fullest_node():
    placement = NodePlacement([offer()])
    placement.add(Workload(name="ctl", groups=("g",), spread="any_node", replicas=3, pod=pod(cpu_millis=100)))
    cpu = next(f for f in placement.use("g").fullest if f.resource.label == "cpu")
    assert cpu.asked == 300 and cpu.shares[0].pods == 3


def test_a_group_without_nodes_that_must_run_engines_is_refused():
    (problem, packing) = problems([engines("e", replicas=1, gpus=1)], count=0)
    assert "has no nodes, but e must run there" in problem
    assert "cannot all be placed" in packing


def test_controllers_land_only_on_groups_no_taint_of_their_own_protects():
    groups = {
        "open": GroupFacts(instance_type="ml.g6e.2xlarge", repels_controllers=False),
        "dedicated": GroupFacts(instance_type="ml.g6e.2xlarge", repels_controllers=True),
    }
    for controller in OPERATOR_CONTROLLERS:
        workload = controller.workload(groups)
        assert workload is not None and workload.groups == ("open",) and workload.spread == "any_node"
    assert all(c.workload({"dedicated": groups["dedicated"]}) is None for c in OPERATOR_CONTROLLERS)
