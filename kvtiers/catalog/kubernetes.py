"""The Kubernetes versions kvtiers knows, with their EKS support dates and whether HyperPod documents them: the one
table the environment schema, the EKS construct and the synth's support check read.

Sources (read 2026-12-03):
- EKS user guide, "Understand the Kubernetes version lifecycle on EKS", release calendar
  (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html; awsdocs/amazon-eks-user-guide
  ``latest/ug/versioning/kubernetes-versions.adoc``): the dates of 1.30 to 1.33, and the rule that a version has
  standard support for 14 months after its EKS release, then extended support (paid per cluster hour) for 12
  months; on the end of extended support EKS creates no new cluster of that version and upgrades existing ones.
  Billing for extended support starts at the beginning (UTC) of the day standard support ends.
- 1.34 (EKS release 2025-10-02) and 1.35 (2026-01-27): the same rule; the dates as endoflife.date's Amazon EKS page
  lists them (the stored copy of AWS's calendar predates both releases).
- SageMaker HyperPod, "Getting started with Amazon EKS support in SageMaker HyperPod"
  (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html): the newest copy read
  (docs.amazonaws.cn, 2026) lists 1.28 to 1.34; none lists 1.35 or later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from enum import Enum


@dataclass(frozen=True, kw_only=True)
class KubernetesRelease:
    """One Kubernetes minor version on EKS.

    :param version: ``"1.34"``.
    :param end_of_standard_support: the first day (UTC) of extended support.
    :param end_of_extended_support: the first day (UTC) EKS no longer supports the version.
    :param hyperpod_documented: HyperPod's EKS prerequisites list the version.
    """

    version: str
    end_of_standard_support: date
    end_of_extended_support: date
    hyperpod_documented: bool


RELEASES = (
    KubernetesRelease(
        version="1.30",
        end_of_standard_support=date(2025, 7, 23),
        end_of_extended_support=date(2026, 7, 23),
        hyperpod_documented=True,
    ),
    KubernetesRelease(
        version="1.31",
        end_of_standard_support=date(2025, 11, 26),
        end_of_extended_support=date(2026, 11, 26),
        hyperpod_documented=True,
    ),
    KubernetesRelease(
        version="1.32",
        end_of_standard_support=date(2026, 3, 23),
        end_of_extended_support=date(2027, 3, 23),
        hyperpod_documented=True,
    ),
    KubernetesRelease(
        version="1.33",
        end_of_standard_support=date(2026, 7, 29),
        end_of_extended_support=date(2027, 7, 29),
        hyperpod_documented=True,
    ),
    KubernetesRelease(
        version="1.34",
        end_of_standard_support=date(2026, 12, 2),
        end_of_extended_support=date(2027, 12, 2),
        hyperpod_documented=True,
    ),
    KubernetesRelease(
        version="1.35",
        end_of_standard_support=date(2027, 3, 27),
        end_of_extended_support=date(2028, 3, 27),
        hyperpod_documented=False,
    ),
)

DEFAULT_KUBERNETES_VERSION = "1.34"
"""The newest version HyperPod documents. On 2026-12-03 no version HyperPod documents has EKS standard support
(1.34's ended on 2026-12-02), so the default is in extended support until 2027-12-02 and synth says so; 1.35,
which EKS still supports in standard support, is not documented for HyperPod (its node images are HyperPod's own)."""


class Support(Enum):
    STANDARD = "standard support"
    EXTENDED = "extended support"
    ENDED = "no support"


def release(version: str) -> KubernetesRelease:
    """The table's row for ``version`` if HyperPod documents it; a ``ValueError`` naming those it does otherwise."""
    found = next((r for r in RELEASES if r.version == version), None)
    if found is None or not found.hyperpod_documented:
        why = "is not a version kvtiers knows" if found is None else "is not documented for SageMaker HyperPod"
        raise ValueError(f"Kubernetes {version} {why}; use one of {', '.join(hyperpod_versions())}")
    return found


def _row(version: str) -> KubernetesRelease:
    found = next((r for r in RELEASES if r.version == version), None)
    if found is None:
        raise ValueError(f"Kubernetes {version} is not a version kvtiers knows")
    return found


def hyperpod_versions() -> tuple[str, ...]:
    return tuple(r.version for r in RELEASES if r.hyperpod_documented)


def support(version: str, on: date) -> Support:
    row = _row(version)
    if on >= row.end_of_extended_support:
        return Support.ENDED
    if on >= row.end_of_standard_support:
        return Support.EXTENDED
    return Support.STANDARD


def support_note(version: str, on: date) -> str:
    """One sentence on ``version``'s EKS support on ``on``, with the dates."""
    row = _row(version)
    status = support(version, on)
    if status is Support.ENDED:
        return (
            f"Kubernetes {version}: EKS extended support ended on {row.end_of_extended_support} (standard support "
            f"ended on {row.end_of_standard_support}); EKS creates no new cluster of it. Use "
            f"{DEFAULT_KUBERNETES_VERSION} or another of {', '.join(hyperpod_versions())} still supported on {on}"
        )
    if status is Support.EXTENDED:
        return (
            f"Kubernetes {version} is in EKS extended support since {row.end_of_standard_support} (billed per "
            f"cluster hour) until {row.end_of_extended_support}, when EKS upgrades the control plane by itself"
        )
    return f"Kubernetes {version} has EKS standard support until {row.end_of_standard_support}"
