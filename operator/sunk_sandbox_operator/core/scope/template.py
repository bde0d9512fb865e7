"""What the scheduler's pod template says it runs, and whether it must roll onto the list (pure)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .. import selectors


def scope_hash(values: Iterable[str]) -> str:
    """Short, order-independent digest for the pod-template annotation sunksandbox.dev/scope-hash."""
    canon = json.dumps(sorted(set(values)), separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]



@dataclass(frozen=True)
class RollDecision:
    workload: str | None = None      # patch this Deployment's (or StatefulSet's) pod-template hash
    kind: str = "Deployment"
    hash: str | None = None
    generation: int | None = None    # and the ledger generation it is rolled for
    note: str | None = None          # say this in the condition message instead


def scheduler_workload(workloads: Sequence[Mapping[str, Any]], pod_selector: Any) -> Mapping[str, Any] | None:
    """The Deployment or StatefulSet running the scheduler: pod template labels matching podSelector
    (Deployments first, then by name)."""
    found = [w for w in workloads
             if selectors.matches(pod_selector, ((((w.get("spec") or {}).get("template") or {})
                                                  .get("metadata") or {}).get("labels")))]
    return sorted(found, key=lambda x: (x.get("kind", "Deployment") != "Deployment", x["metadata"]["name"]))[0] \
        if found else None


def decide_roll(workloads: Sequence[Mapping[str, Any]], pod_selector: Any, namespace: str, values: Iterable[str],
                *, wrote: bool, hash_annotation: str, generation: int | None = None,
                generation_annotation: str | None = None) -> RollDecision:
    """Roll the scheduler when what its pod template says it runs is not what the target holds:
    the list's hash differs, or the list was written again since the roll (ledger `generation`:
    a list put back after a revert — a `helm upgrade` that also restarted the scheduler on the
    chart's list — has the old names but must still be re-read). Level-triggered: compares the
    template with the target, whoever changed either. Unless `wrote` (the operator wrote the list: this
    sync, or the ledger's generation says so), a scheduler we never rolled is left alone."""
    dep = scheduler_workload(workloads, pod_selector)
    if dep is None:
        return RollDecision(note=f"No Deployment or StatefulSet in {namespace} has pod template labels matching "
                            "spec.scheduler.podSelector, so the scheduler was not restarted; restart it by hand if "
                            "it reads its config only at start.")
    annotations = (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    want, have = scope_hash(values), annotations.get(hash_annotation)
    have_gen = annotations.get(generation_annotation) if generation_annotation else None
    # A template from before generations were recorded (no annotation) is taken as current.
    stale_gen = generation is not None and have_gen is not None and have_gen != str(generation)
    if (have == want and not stale_gen) or (not wrote and have is None):
        return RollDecision()
    return RollDecision(workload=dep["metadata"]["name"], kind=dep.get("kind", "Deployment"), hash=want,
                        generation=generation)
