"""Limits AWS enforces at deploy time that synth can check first, so a bad value fails before anything deploys.

Pure functions without CDK imports: the environment schema and the constructs both use them.
"""

from __future__ import annotations

GP3_MIN_IOPS = 3000
"""The gp3 baseline (no extra charge), also the least a gp3 volume can have."""
GP3_MAX_IOPS = 16000
GP3_MAX_IOPS_PER_GIB = 500
"""EBS user guide, "General Purpose SSD volumes": gp3 allows at most 500 provisioned IOPS per GiB of size."""
GP3_MIN_MIBPS = 125
"""The gp3 baseline throughput, also the least a gp3 volume can have."""
GP3_MAX_MIBPS = 1000
GP3_MAX_MIBPS_PER_IOPS = 0.25
"""Same page: at most 0.25 MiB/s of provisioned throughput per provisioned IOPS."""
GP3_MAX_GIB = 16384


def gp3_problem(*, size_gib: int, iops: int, throughput_mibps: int) -> str | None:
    """Why EC2 would refuse a gp3 volume with these numbers, or ``None`` when it would accept them."""
    if not 1 <= size_gib <= GP3_MAX_GIB:
        return f"a gp3 volume is 1 to {GP3_MAX_GIB} GiB, got {size_gib} GiB"
    if not GP3_MIN_IOPS <= iops <= GP3_MAX_IOPS:
        return f"gp3 IOPS are {GP3_MIN_IOPS} to {GP3_MAX_IOPS}, got {iops}"
    if not GP3_MIN_MIBPS <= throughput_mibps <= GP3_MAX_MIBPS:
        return f"gp3 throughput is {GP3_MIN_MIBPS} to {GP3_MAX_MIBPS} MiB/s, got {throughput_mibps} MiB/s"
    if iops > GP3_MIN_IOPS and iops > size_gib * GP3_MAX_IOPS_PER_GIB:
        return (
            f"{iops} IOPS on a {size_gib} GiB gp3 volume exceeds {GP3_MAX_IOPS_PER_GIB} IOPS per GiB; "
            f"use at least {-(-iops // GP3_MAX_IOPS_PER_GIB)} GiB or at most "
            f"{max(GP3_MIN_IOPS, size_gib * GP3_MAX_IOPS_PER_GIB)} IOPS"
        )
    if throughput_mibps > iops * GP3_MAX_MIBPS_PER_IOPS:
        return (
            f"{throughput_mibps} MiB/s exceeds {GP3_MAX_MIBPS_PER_IOPS} MiB/s per provisioned IOPS "
            f"({iops} IOPS allow at most {int(iops * GP3_MAX_MIBPS_PER_IOPS)} MiB/s)"
        )
    return None
