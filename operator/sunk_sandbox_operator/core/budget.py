"""The reconcile budget, decided: which binding overran, on which condition it is reported, and what it says.

The shell (controller/budget.py) measures the CPU each concern of a reconcile spent on the main
thread and hands the figures here with the heaviest objects discovery read. Over the budget, the
overrun goes to the condition of the concern that spent the most (discovery -> SchedulerReady,
the policy -> PolicySynced, ...), reason `OverBudget`, with a message naming that concern, the
objects it read, the figures, the setting and when the binding is looked at again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..api.reasons import Common, ConditionType
from .compose import Part

# What each measured concern does, for the message (the keys are the conditions they report).
STEPS: dict[ConditionType, str] = {
    ConditionType.SCHEDULER_READY: "discovering the scheduler from its pods and ConfigMaps",
    ConditionType.POLICY_SYNCED: "syncing the runner policy",
    ConditionType.SCOPE_SYNCED: "syncing the scope target",
    ConditionType.SLURM_READY: "reading Slurm",
    ConditionType.PLACEMENT_VERIFIED: "judging the sandbox pods",
}
SETTING = "SSB_RECONCILE_CPU_SECONDS"
WALK_LIMIT = 100_000  # nodes walked to weigh one object (its weight is then a lower bound)


@dataclass(frozen=True)
class Input:
    kind: str
    namespace: str
    name: str
    size: int  # characters of its strings (keys and values), at least

    def text(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({_size(self.size)})"


def _size(n: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def weight(obj: Any, limit: int = WALK_LIMIT) -> int:
    """Characters in the strings of a decoded JSON object (keys included): what a parse of it reads.
    Walks at most `limit` nodes, so weighing costs far less than parsing what it weighs."""
    total, stack, seen = 0, [obj], 0
    while stack and seen < limit:
        node = stack.pop()
        seen += 1
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                total += len(key) if isinstance(key, str) else 0
                stack.append(value)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return total


def heaviest(configmaps: Iterable[Any], pods: Iterable[Any], n: int = 3) -> tuple[Input, ...]:
    """The `n` heaviest of the ConfigMaps (their data) and pods (their spec) discovery read."""
    found: list[Input] = []
    for kind, objs, part in (("ConfigMap", configmaps, "data"), ("Pod", pods, "spec")):
        for obj in objs:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            meta = meta if isinstance(meta, Mapping) else {}
            found.append(Input(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                               weight(obj.get(part) if isinstance(obj, Mapping) else None)))
    found.sort(key=lambda i: -i.size)
    return tuple(found[:n])


def overrun(spent: Mapping[ConditionType, float], total: float, budget: float, inputs: tuple[Input, ...],
            retry_in: float) -> Part | None:
    """The condition to report when `total` CPU seconds exceed `budget` (> 0), else None.
    `spent`: CPU seconds per measured concern (by condition); the rest of `total` was the
    reconcile's own glue. `retry_in`: seconds until the binding is reconciled again."""
    if budget <= 0 or total <= budget:
        return None
    rest = total - sum(spent.values())
    condition = max(spent, key=lambda c: spent[c]) if spent else ConditionType.SCHEDULER_READY
    seconds = spent.get(condition, 0.0)
    if rest > seconds:
        what = "in the reconcile's own steps"
        seconds = rest
        condition = ConditionType.SCHEDULER_READY
    else:
        what = STEPS.get(condition, f"on {condition}")
        if condition == ConditionType.SCHEDULER_READY and inputs:
            what += " (the largest: " + ", ".join(i.text() for i in inputs) + ")"
    message = (f"this binding's reconcile used {total:.1f} s of CPU, over the operator's budget of {budget:g} s "
               f"({SETTING}): {seconds:.1f} s {what}. Shorten or fix what it reads (a huge or malformed "
               f"value is the usual cause); the binding is reconciled again in {retry_in:.0f} s and not sooner, "
               "so other bindings are not delayed")
    return Part(condition, "False", Common.OVER_BUDGET, message)
