"""EKS Pod Identity associations across a deploy: EKS keeps one association per ServiceAccount
(``CreatePodIdentityAssociation`` refuses a second for the same cluster, namespace and ServiceAccount), and
CloudFormation creates a resource under a new logical ID before it deletes the one under the old ID. So an
association that moves to another logical ID (its construct changed: an API key turned off, weights moved between
Hugging Face and S3) fails the deploy, which rolls back; so do two associations of one ServiceAccount in one synth.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kvtiers.change.manifests import Templates

ASSOCIATION = "AWS::EKS::PodIdentityAssociation"


def _associations(templates: Templates) -> Iterator[tuple[str, str, str]]:
    """(ServiceAccount key, stack, logical ID) of every association; the key holds the cluster as the template
    writes it (a reference or a name), the namespace and the ServiceAccount."""
    for stack, template in templates.items():
        for logical_id, resource in (template.get("Resources") or {}).items():
            if resource.get("Type") != ASSOCIATION:
                continue
            props: dict[str, Any] = resource.get("Properties") or {}
            key = json.dumps([props.get("ClusterName"), props.get("Namespace"), props.get("ServiceAccount")])
            yield key, stack, logical_id


def _label(key: str) -> str:
    _, namespace, account = json.loads(key)
    return f"{namespace}/{account}"


def association_conflicts(before: Templates, after: Templates) -> tuple[str, ...]:
    """Why the deploy from ``before`` to ``after`` fails on a Pod Identity association, if it does."""
    old: dict[str, set[tuple[str, str]]] = {}
    new: dict[str, set[tuple[str, str]]] = {}
    for key, stack, logical_id in _associations(before):
        old.setdefault(key, set()).add((stack, logical_id))
    for key, stack, logical_id in _associations(after):
        new.setdefault(key, set()).add((stack, logical_id))
    found = []
    for key, ids in sorted(new.items()):
        if len(ids) > 1:
            found.append(
                f"ServiceAccount {_label(key)} has {len(ids)} Pod Identity associations "
                f"({', '.join(sorted(i for _, i in ids))}); EKS allows one"
            )
        moved = ids - old.get(key, ids)
        if old.get(key) and moved:
            found.append(
                f"ServiceAccount {_label(key)}'s Pod Identity association moves from "
                f"{', '.join(sorted(i for _, i in old[key]))} to {', '.join(sorted(i for _, i in moved))}: "
                "CloudFormation creates the new one before it deletes the old, EKS refuses a second association for "
                "the ServiceAccount, and the deploy rolls back. Deploy the change in two steps (first without the "
                "ServiceAccount's association, then with it) or keep its logical ID"
            )
    return tuple(found)
