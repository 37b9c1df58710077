"""Admit a pod through a kvtiers Kyverno ``Policy`` offline, with real engines for each step:

- webhook match conditions and ``validate.cel`` expressions: CEL, evaluated by cel-python (``celpy``);
- ``foreach`` preconditions and ``{{ }}`` variables: JMESPath, evaluated by the ``jmespath`` package;
- ``patchesJson6902``: the ``jsonpatch`` package (RFC 6902), in the list's order with ``elementIndex`` the element's
  index, as Kyverno v1.15.2 applies foreach JSON patches (``pkg/engine/handlers/mutation/common.go``: only strategic
  merge patches go in reverse order; ``pkg/engine/mutate/patch/patchJSON6902.go``: evanphx/json-patch, whose
  ``EnsurePathExistsOnAdd`` this helper does not imitate, so a patch relying on it fails here);
- ``patchStrategicMerge``: kubectl's kustomize (the kubectl of the project's pinned kubectl layer), whose strategic
  merge is the ``patchstrategicmerge`` filter Kyverno v1.15.2 applies (``pkg/engine/mutate/patch/
  strategicMergePatch.go``). Kyverno first pre-processes anchors; the project's patches have none, and this helper
  refuses a patch with anchors rather than imitating that step.

Only the policy features kvtiers uses are implemented; anything else raises, so a policy change that this helper
cannot evaluate faithfully fails the tests instead of passing them.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import celpy
import jmespath
import jsonpatch
import yaml

VARIABLE = re.compile(r"\{\{\s*(.+?)\s*\}\}")
ANCHOR = re.compile(r"^[+^<=X]?\(.*\)$")
NUMERIC = re.compile(r"^[+-]?\.?[0-9]")


class Denied(Exception):
    """The admission webhook refused the pod."""


@dataclass
class Admission:
    pod: dict
    reviewed: bool
    """Whether the policy's webhook received the pod at all (match conditions and rule match)."""
    messages: list[str] = field(default_factory=list)


def cel(expression: str, activation: dict):
    """Evaluate ``expression``; plain JSON values in ``activation`` are converted, CEL values are passed as they are."""
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return program.evaluate(
        {k: v if isinstance(v, celpy.celtypes.MapType) else celpy.json_to_cel(v) for k, v in activation.items()}
    )


def _substitute(value, context: dict):
    if isinstance(value, dict):
        for key in value:
            if ANCHOR.match(key):
                raise NotImplementedError(f"Kyverno anchor {key!r}: this helper does not pre-process anchors")
        return {k: _substitute(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, context) for v in value]
    if isinstance(value, str):
        whole = VARIABLE.fullmatch(value.strip())
        if whole:
            return jmespath.search(whole.group(1), context)
        return VARIABLE.sub(lambda m: str(jmespath.search(m.group(1), context)), value)
    return value


def _conditions_hold(conditions: dict | None, context: dict) -> bool:
    if not conditions:
        return True
    if set(conditions) - {"all"}:
        raise NotImplementedError(f"preconditions {sorted(conditions)}")
    for condition in conditions["all"]:
        key, value = _substitute(condition["key"], context), _substitute(condition["value"], context)
        if condition["operator"] not in ("Equals", "NotEquals"):
            raise NotImplementedError(f"operator {condition['operator']}")
        if isinstance(value, str) and any(ch in value for ch in "*?"):
            raise NotImplementedError(f"Equals with a wildcard value {value!r}")
        # Kyverno compares strings that parse as a quantity or a duration as such (pkg/engine/variables/operator/
        # equal.go, notequal.go @ v1.15.2); every quantity and duration starts with a sign, a digit or a dot.
        if any(isinstance(v, str) and NUMERIC.match(v) for v in (key, value)):
            raise NotImplementedError(f"Equals on a possible quantity or duration: {key!r}, {value!r}")
        if (key == value) != (condition["operator"] == "Equals"):
            return False
    return True


def _rule_matches(rule: dict, pod: dict, operation: str) -> bool:
    if set(rule["match"]) != {"any"} or "exclude" in rule:
        raise NotImplementedError("match other than 'any'")
    for block in rule["match"]["any"]:
        resources = block["resources"]
        if set(resources) - {"kinds", "operations", "namespaces", "selector"}:
            raise NotImplementedError(f"match resources {sorted(resources)}")
        labels = pod["metadata"].get("labels") or {}
        if (
            resources["kinds"] == ["Pod"]
            and operation in resources.get("operations", [operation])
            and pod["metadata"]["namespace"] in resources.get("namespaces", [pod["metadata"]["namespace"]])
            and all(labels.get(k) == v for k, v in resources.get("selector", {}).get("matchLabels", {}).items())
        ):
            if set(resources.get("selector", {})) - {"matchLabels"}:
                raise NotImplementedError("selector other than matchLabels")
            return True
    return False


def strategic_merge(kubectl: Path, pod: dict, patch: dict) -> dict:
    """``patch`` applied to ``pod`` by kubectl's kustomize (strategic merge, merge keys from the Pod schema)."""
    target = {
        "apiVersion": pod["apiVersion"],
        "kind": pod["kind"],
        "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pod.yaml").write_text(json.dumps(pod))
        (root / "patch.yaml").write_text(json.dumps({**target, **patch}))
        (root / "kustomization.yaml").write_text("resources: [pod.yaml]\npatches: [{path: patch.yaml}]\n")
        out = subprocess.run([str(kubectl), "kustomize", str(root)], capture_output=True, text=True, check=True)
    return yaml.safe_load(out.stdout)


def check_policy(policy: dict) -> None:
    """What Kyverno's policy webhook refuses before any pod is seen (at v1.15.2: ``api/kyverno/v1/utils.go``
    ``ValidatePolicyName``, a name of more than 63 characters; ``resource_description_types.go``, a namespaced
    ``Policy`` that filters namespaces: it applies in its own namespace only)."""
    if len(policy["metadata"]["name"]) > 63:
        raise ValueError(f"metadata.name: Too long: may not be more than 63 bytes: {policy['metadata']['name']!r}")
    if policy["kind"] != "Policy":
        return
    for rule in policy["spec"]["rules"]:
        for block in rule["match"].get("any", []) + rule["match"].get("all", []):
            if block["resources"].get("namespaces"):
                raise ValueError("Filtering namespaces not allowed in namespaced policies")


def mutate(kubectl: Path, policy: dict, pod: dict, operation: str = "CREATE") -> dict:
    check_policy(policy)
    for rule in policy["spec"]["rules"]:
        if "mutate" not in rule or not _rule_matches(rule, pod, operation):
            continue
        if set(rule["mutate"]) != {"foreach"}:
            raise NotImplementedError(f"mutate {sorted(rule['mutate'])}")
        for each in rule["mutate"]["foreach"]:
            if (
                set(each) - {"list", "preconditions", "patchStrategicMerge", "patchesJson6902"}
                or len(set(each) & {"patchStrategicMerge", "patchesJson6902"}) != 1
            ):
                raise NotImplementedError(f"foreach {sorted(each)}")
            elements = jmespath.search(each["list"], {"request": {"object": pod}}) or []
            for index, element in enumerate(copy.deepcopy(elements)):
                context = {
                    "request": {"object": pod, "operation": operation},
                    "element": element,
                    "elementIndex": index,
                }
                if not _conditions_hold(each.get("preconditions"), context):
                    continue
                if "patchStrategicMerge" in each:
                    pod = strategic_merge(kubectl, pod, _substitute(each["patchStrategicMerge"], context))
                else:
                    patch = yaml.safe_load(_substitute(each["patchesJson6902"], context))
                    pod = jsonpatch.apply_patch(pod, patch)
    return pod


def validate(policy: dict, pod: dict, operation: str = "CREATE") -> list[str]:
    check_policy(policy)
    """Messages of the failed CEL expressions of every matching validate rule (empty: admitted)."""
    messages = []
    for rule in policy["spec"]["rules"]:
        if "validate" not in rule or not _rule_matches(rule, pod, operation):
            continue
        spec = rule["validate"]
        if spec.get("failureAction") != "Enforce" or set(spec) - {"failureAction", "cel", "message"}:
            raise NotImplementedError(f"validate {sorted(spec)}")
        variables = celpy.celtypes.MapType({})
        for variable in spec["cel"].get("variables", []):
            value = cel(variable["expression"], {"object": pod, "variables": variables})
            variables[celpy.celtypes.StringType(variable["name"])] = value
        for check in spec["cel"]["expressions"]:
            if not cel(check["expression"], {"object": pod, "variables": variables}):
                messages.append(check["message"])
    return messages


def webhook_receives(policy: dict, pod: dict | None, operation: str = "CREATE", namespace: str | None = None) -> bool:
    """Whether the policy's own webhook (``spec.webhookConfiguration.matchConditions``) gets this request."""
    request = {"operation": operation, "namespace": namespace or (pod or {}).get("metadata", {}).get("namespace", "")}
    conditions = policy["spec"]["webhookConfiguration"]["matchConditions"]
    return all(bool(cel(c["expression"], {"object": pod, "request": request})) for c in conditions)


def admit(kubectl: Path, policy: dict | None, pod: dict, operation: str = "CREATE") -> Admission:
    """The pod as it would be stored, or ``Denied`` with the failed checks' messages."""
    if policy is None or not webhook_receives(policy, pod, operation):
        return Admission(pod=pod, reviewed=False)
    mutated = mutate(kubectl, policy, pod, operation)
    messages = validate(policy, mutated, operation)
    if messages:
        raise Denied("; ".join(messages))
    return Admission(pod=mutated, reviewed=True)
