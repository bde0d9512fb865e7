"""The roll loop's decision (pure): the list the running scheduler was rolled for vs the list now.

A wake of the loop (`controller/scope/roll_loop.py`) reads facts only: the target's list and its
ledger generation, the scheduler's pod template (the list's hash, the generation and the time it
was last rolled for: `scope-hash`, `scope-generation`, `rolled-at`), how many namespaces that belong
are not listed yet, and, with grants on, how many listed ones still lack our RoleBinding. `decide`
answers once: patch the template now, look again in so many seconds, or nothing.

- Never in Observe mode, with `restartScheduler: false`, or for a target whose own tool re-renders
  the scheduler (Argo CD, Flux: the chart's checksum annotation rolls it).
- Level-triggered: the template is compared with the list, whoever changed either; a template
  without our hash is rolled only once the ledger says the operator wrote the list.
- Rationed (`core.scope.pacing`): at most one roll per `minRollInterval`, from the later of memory's
  last roll and the template's `rolled-at` (a restart, a death before the status flush); the first
  change after a quiet interval rolls at once, later ones fold into one roll at the interval's end.
- Held while the list is about to change (a burst: namespaces that belong and are not listed yet)
  and while listed namespaces wait for their RoleBinding (the restarted scheduler starts its watches
  where it may already watch and bind); the list loop's and the grants loop's writes wake it, and
  it holds at most HOLD_SECONDS.
- Restore (`leaving`: the binding is being deleted) is not rationed and holds for nothing: the
  template is put on the restored list if it carries our hash.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ...api.reasons import ScopeSynced, grant_targets
from ...api.spec import LabelSelector
from . import pacing
from .errors import Finding
from .template import RollDecision, decide_roll, scheduler_workload

HOLD_SECONDS = 30.0    # the longest a roll waits for the list or the grants (a grant that keeps failing)
HOLD_RECHECK = 1.0     # ... looking again this often (the grants' informer may lag their creates)


@dataclass(frozen=True)
class RollSettings:
    can_roll: bool = False                  # the target takes effect only when the scheduler restarts
    restart: bool = True                    # spec.scope.restartScheduler
    observe: bool = False                   # spec.mode Observe
    interval: float = pacing.DEFAULT_INTERVAL  # spec.scope.minRollInterval, seconds
    namespace: str = ""                     # the scheduler's
    pod_selector: LabelSelector | None = None  # spec.scheduler.podSelector: which workload runs it

    @property
    def rolls(self) -> bool:
        """May this binding roll the scheduler at all (then a wake reads its workloads)?"""
        return self.can_roll and self.restart and not self.observe


@dataclass(frozen=True)
class RollObservation:
    settings: RollSettings
    values: tuple[str, ...] | None          # the target's list now (None: in error or scope type cluster)
    generation: int = 0                     # the ledger's: the operator's list writes
    workloads: tuple[Mapping[str, Any], ...] | None = None  # the scheduler namespace's Deployments and StatefulSets
    workloads_forbidden: str | None = None  # ... or why they could not be listed
    unlisted: int = 0                       # namespaces that belong and are not listed yet
    ungranted: int = 0                      # listed namespaces still without our RoleBinding (grants on)
    leaving: bool = False                   # Restore: the binding is being deleted
    now: float = 0.0                        # monotonic
    now_iso: str = ""


@dataclass(frozen=True)
class RollState:
    """The roll loop's memory, as `decide` (and `rolled`, `refused`) returned it."""

    last_roll: float | None = None          # when the scheduler was last rolled (monotonic)
    last_roll_at: str | None = None         # ... status.scope.lastRollTime
    due: float | None = None                # the folded roll's time (monotonic), while one is due
    next_roll_at: str | None = None         # ... status.scope.nextRollTime
    held_since: float | None = None         # held for the list or the grants since (monotonic)
    problem: Finding | None = None          # the workloads could not be listed, the patch was refused
    note: str | None = None                 # for ScopeSynced's message (no workload runs the scheduler)

    def failed(self, problem: Finding) -> "RollState":
        return replace(self, problem=problem)

    def times(self) -> dict[str, str]:
        """status.scope.lastRollTime, and nextRollTime while a folded roll is due."""
        out = {"lastRollTime": self.last_roll_at} if self.last_roll_at else {}
        return {**out, "nextRollTime": self.next_roll_at} if self.next_roll_at and self.due is not None else out


@dataclass(frozen=True)
class RollStep:
    memory: RollState
    patch: RollDecision | None = None       # patch this pod template now
    wake: float | None = None               # look again in this many seconds (None: when woken)


def cannot_list_workloads(namespace: str, error: str) -> Finding:
    return Finding(ScopeSynced.FORBIDDEN, f"the operator may not list Deployments and StatefulSets in {namespace}: "
                                          f"{error}; {grant_targets(namespace)}")


def cannot_patch(d: RollDecision, namespace: str, error: str) -> Finding:
    return Finding(ScopeSynced.FORBIDDEN, f"the operator may not patch {d.kind} {namespace}/{d.workload}: {error}; "
                                          f"{grant_targets(namespace)}")


def _last_rolled(obs: RollObservation, m: RollState) -> RollState:
    """Memory with the roll the template records (`pacing.rolled_later`), if later than memory's:
    status.scope.lastRollTime is written after the roll, so a death in between leaves it only there."""
    workload = scheduler_workload(obs.workloads or (), obs.settings.pod_selector)
    seen = pacing.rolled_later(workload, m.last_roll_at, obs.now_iso, obs.now)
    return m if seen is None else replace(m, last_roll=seen[0], last_roll_at=seen[1])


def decide(obs: RollObservation, mem: RollState) -> RollStep:
    """Patch now, look again later, or nothing (see the module docstring)."""
    s = obs.settings
    quiet = RollState(mem.last_roll, mem.last_roll_at)
    if not s.rolls or obs.values is None:
        return RollStep(quiet)
    if obs.workloads is None:
        return RollStep(replace(quiet, problem=cannot_list_workloads(s.namespace, obs.workloads_forbidden or
                                                                      "they were not listed")))
    m = _last_rolled(obs, quiet)
    check = decide_roll(obs.workloads, s.pod_selector, s.namespace, obs.values,
                        wrote=not obs.leaving and obs.generation > 0, hash_annotation=SCOPE_HASH_ANNOTATION,
                        generation=None if obs.leaving else obs.generation,
                        generation_annotation=SCOPE_GENERATION_ANNOTATION)
    if check.workload is None or check.hash is None:  # on the list already, or nothing runs the scheduler
        return RollStep(replace(m, note=check.note))
    wait = 0.0 if obs.leaving else pacing.roll_wait(m.last_roll, obs.now, s.interval)
    if wait > 0:  # folded: one roll at the interval's end carries every change until then
        due = obs.now + wait
        same = mem.due is not None and abs(mem.due - due) < 1e-6
        return RollStep(replace(m, due=due, next_roll_at=mem.next_roll_at if same else pacing.after(obs.now_iso, wait)),
                        wake=wait)
    if not obs.leaving and (obs.unlisted or obs.ungranted):
        since = mem.held_since if mem.held_since is not None else obs.now
        if obs.now - since < HOLD_SECONDS:
            return RollStep(replace(m, held_since=since), wake=min(HOLD_RECHECK, since + HOLD_SECONDS - obs.now))
        m = replace(m, held_since=since)  # held long enough: roll, and do not hold again while this lasts
    return RollStep(m, patch=check)


def rolled(mem: RollState, at: tuple[float, str] | None) -> RollState:
    """The patch was made at `at` (monotonic, RFC 3339), or found its workload gone (None)."""
    m = replace(mem, due=None, next_roll_at=None, problem=None)
    return m if at is None else replace(m, last_roll=at[0], last_roll_at=at[1])


def refused(mem: RollState, patch: RollDecision, namespace: str, error: str) -> RollState:
    """The patch was refused (403): reported, and tried again at the next wake."""
    return replace(mem, problem=cannot_patch(patch, namespace, error))
