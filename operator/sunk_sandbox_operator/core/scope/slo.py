"""The placement SLO's bookkeeping (pure): which new sandbox namespaces await which stage.

A namespace is placeable (a sandbox pod there can be scheduled) once, in order:

- `listed`: the scope target's list holds it (the list loop wrote or read it);
- `granted`: the scheduler may watch and bind pods there (our RoleBinding, a SubjectAccessReview's
  yes, or its cluster-wide permission), as the grants loop last saw;
- `rolled`: the running scheduler was rolled for a list that holds it and its workload has rolled
  out and is Ready (the roll loop reads the template and its status).

The three loops feed one `PlacementClock` per binding with what they saw and when (wall-clock
seconds: the namespace's creationTimestamp is the start). When the last stage completes the clock
returns one `Placed`: the seconds from creation, and the stage that took longest (`dominant`). A
namespace still waiting `GIVE_UP_SECONDS` after its creation is returned once as well (its age, the
stage it is stuck at): a namespace never placed must count against the objective, not vanish.

Only namespaces the operator saw created (a watch ADDED event, creationTimestamp under
`FRESH_SECONDS` old) are timed: one relabelled into a selector, or listed before a restart, has no
start the operator can know. At most `MAX_WAITING` wait at once per binding (more are not timed:
memory stays bounded under a burst of namespaces); every call is linear in what waits.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from ...api.keys import SCOPE_HASH_ANNOTATION
from .roll_loop import RollObservation
from .template import scheduler_workload, scope_hash

STAGES = ("listed", "granted", "rolled")
MAX_WAITING = 10_000       # namespaces timed at once, per binding
FRESH_SECONDS = 300.0      # a namespace created longer ago than this when first seen is not timed
GIVE_UP_SECONDS = 900.0    # observed as it is (slow) when not placeable this long after creation
ROLLS_KEPT = 4             # the rolls whose waiting namespaces are remembered


@dataclass(frozen=True)
class Placed:
    """One observation: `namespace` placeable `seconds` after its creation; `dominant` took longest
    (or, given up, the stage it never reached)."""

    namespace: str
    seconds: float
    dominant: str
    given_up: bool = False


@dataclass(slots=True)
class _Waiting:
    created: float
    listed: float | None = None
    granted: float | None = None


def created_at(metadata: Mapping[str, Any] | None) -> float | None:
    """metadata.creationTimestamp as epoch seconds (None: absent or not RFC 3339)."""
    raw = (metadata or {}).get("creationTimestamp")
    if not isinstance(raw, str) or len(raw) > 40:
        return None
    try:
        t = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def rolled_out(workload: Mapping[str, Any] | None) -> bool:
    """The Deployment or StatefulSet has rolled its current template out and is Ready (kubectl
    rollout status's rule: the controller saw this generation, every replica runs it, none is old,
    every one is available/ready)."""
    if workload is None:
        return False
    meta, spec, status = (workload.get(k) or {} for k in ("metadata", "spec", "status"))
    want = spec.get("replicas", 1)
    if not isinstance(want, int) or status.get("observedGeneration", -1) < (meta.get("generation") or 0):
        return False
    updated = status.get("updatedReplicas") or 0
    if workload.get("kind") == "StatefulSet":
        return (updated >= want and (status.get("readyReplicas") or 0) >= want
                and status.get("currentRevision") == status.get("updateRevision"))
    return (updated >= want and (status.get("replicas") or 0) <= updated
            and (status.get("availableReplicas") or 0) >= updated)


class PlacementClock:
    """The namespaces one binding times, and the stage each has reached (see the module docstring)."""

    def __init__(self, limit: int = MAX_WAITING) -> None:
        self.limit = limit
        self.waiting: dict[str, _Waiting] = {}
        self.untimed = 0   # namespaces not timed because `limit` were waiting
        # The waiting namespaces each of the last rolls (by the template's scope hash) was for: the
        # list may change again before that rollout is Ready (a trickle), the template keeps only a hash.
        self.rolls: dict[str, frozenset[str]] = {}

    def rolled_for(self, hash_: str, values: Collection[str]) -> None:
        """The operator rolled the scheduler onto `values` (the template's hash `hash_`)."""
        self.rolls = {**dict(list(self.rolls.items())[-(ROLLS_KEPT - 1):]),
                      hash_: frozenset(ns for ns in self.waiting if ns in values)}

    def created(self, namespace: str, created: float | None, now: float) -> None:
        """A namespace that belongs was just created (a watch ADDED event)."""
        if created is None or now - created > FRESH_SECONDS or namespace in self.waiting:
            return
        if len(self.waiting) >= self.limit:
            self.untimed += 1
            return
        self.waiting[namespace] = _Waiting(min(created, now))

    def gone(self, namespace: str) -> None:
        """It no longer belongs (deleted, terminating, relabelled out): not observed."""
        self.waiting.pop(namespace, None)

    def awaits(self, stage: str) -> bool:
        """Does any namespace wait for `stage` now (listed, and granted for `rolled`)?"""
        if stage == "listed":
            return any(w.listed is None for w in self.waiting.values())
        if stage == "granted":
            return any(w.listed is not None and w.granted is None for w in self.waiting.values())
        return any(w.granted is not None for w in self.waiting.values())

    def listed(self, values: Collection[str] | None, now: float) -> None:
        """The target's list now (None: scope type cluster, every namespace is watched)."""
        for ns, w in self.waiting.items():
            if w.listed is None and (values is None or ns in values):
                w.listed = now

    def granted(self, permitted: Collection[str] | None, now: float) -> None:
        """Where the scheduler may watch and bind pods now (None: everywhere, or grants not ours to judge)."""
        for ns, w in self.waiting.items():
            if w.listed is not None and w.granted is None and (permitted is None or ns in permitted):
                w.granted = now

    def rolled(self, running: Collection[str] | None, now: float) -> list[Placed]:
        """The list the scheduler runs, rolled out and Ready (None: the operator does not roll this
        scheduler, so granted is the last stage it can see): the namespaces placeable now."""
        done = [ns for ns, w in self.waiting.items()
                if w.granted is not None and (running is None or ns in running)]
        return [self._placed(ns, now) for ns in done]

    def expire(self, now: float) -> list[Placed]:
        """Namespaces waiting GIVE_UP_SECONDS since creation: observed once, as slow, at the stage they wait for."""
        old = [ns for ns, w in self.waiting.items() if now - w.created >= GIVE_UP_SECONDS]
        return [self._placed(ns, now, given_up=True) for ns in old]

    def _placed(self, ns: str, now: float, given_up: bool = False) -> Placed:
        w = self.waiting.pop(ns)
        listed = w.listed if w.listed is not None else now
        granted = w.granted if w.granted is not None else now
        spans = (listed - w.created, granted - listed, now - granted)
        if given_up:
            dominant = STAGES[0 if w.listed is None else 1 if w.granted is None else 2]
        else:
            dominant = STAGES[max(range(3), key=lambda i: spans[i])]
        return Placed(ns, max(0.0, now - w.created), dominant, given_up)


def running(obs: RollObservation, rolls: Mapping[str, Collection[str]]) -> Collection[str] | None:
    """What the roll loop saw the scheduler run, for `PlacementClock.rolled`: once the workload's
    template has rolled out Ready, the list its hash stands for (the list now, or one of `rolls`, the
    operator's last rolls); () while not (yet), or for a list not known; None
    when the operator does not roll this scheduler (no workload, restartScheduler false, Observe, a
    target its own tool re-renders, scope type cluster)."""
    s = obs.settings
    if not s.rolls or obs.values is None:
        return None
    if obs.workloads is None:
        return ()
    workload = scheduler_workload(obs.workloads, s.pod_selector)
    if workload is None:
        return None
    template = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
    have = (template.get("annotations") or {}).get(SCOPE_HASH_ANNOTATION)
    if not isinstance(have, str) or not rolled_out(workload):
        return ()
    return frozenset(obs.values) if have == scope_hash(obs.values) else rolls.get(have, ())
