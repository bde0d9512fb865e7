"""Sandbox pods and their placeholder jobs, per binding, pure and incremental.

`JobTracker` keeps each expected sandbox pod (placed by the binding's scheduler, not finished)
matched to its placeholder job by the name templates (spec.slurm.restAPI.jobNameTemplates): a pod
event costs one dict lookup per template; a new job list re-judges only the pods whose job names
changed (`slurm.changed`); "missing" (no job `seconds` after the pod's creation) advances over a
heap of unmatched pods. Nothing is a pass over every pod per poll or per status write (the full
re-judge happens when the list appears or comes back after an outage). `jobs_condition` turns the
summary into PlacementVerified's verdict on Slurm's side.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..api.reasons import PlacementVerified
from ..api.status import PlacementJobs, StuckJob
from .conditions import Status
from .pods import PodRecord
from .slurm import JobFact, iso

MISSING_PODS_SHOWN = 5


# ---------------------------------------------------------------- pod → job names


def job_names(templates: Iterable[str], pod: PodRecord) -> tuple[str, ...]:
    """The names a pod's placeholder job may have, one per template (in order; a template using
    {sandboxId} or {jobName} is skipped for a pod without that label). Plain substitution, no
    format(). Several pods may name one job (SUNK 8.2's gang scheduling: one job for a Job's pods)."""
    out = []
    for t in templates:
        if ("{sandboxId}" in t and not pod.sandbox_id) or ("{jobName}" in t and not pod.job_name):
            out.append("")  # keeps template indexes; never a job name
            continue
        out.append(t.replace("{namespace}", pod.namespace).replace("{name}", pod.name).replace("{uid}", pod.uid)
                   .replace("{sandboxId}", pod.sandbox_id or "").replace("{jobName}", pod.job_name or ""))
    return tuple(out)


# ---------------------------------------------------------------- per binding: pods and their jobs


@dataclass(frozen=True)
class JobView:
    """The job list bindings judge against: facts by name, as of a wall-clock time (the last poll
    Slurm answered)."""

    jobs: Mapping[str, JobFact]
    as_of: float


@dataclass(slots=True)
class _Entry:
    ref: str
    namespace: str
    created: float
    names: tuple[str, ...]
    match: int | None = None      # index of the template that matched
    fact: JobFact | None = None


@dataclass(frozen=True)
class JobSummary:
    matched: int
    pending: int                  # stuck: PENDING for a persistent reason
    missing: int
    templates: dict[str, int]
    stuck: tuple[str, JobFact] | None      # (pod, job) waiting longest
    missing_pods: tuple[str, ...]
    missing_example: tuple[str, tuple[str, ...]] | None  # (pod, the names tried)

    def to_status(self) -> PlacementJobs:
        stuck = None
        if self.stuck is not None:
            pod, f = self.stuck
            stuck = StuckJob(pod=pod, job_id=f.job_id, job=f.name, reason=f.reason, since=iso(f.since or 0))
        return PlacementJobs(matched=self.matched, pending=self.pending, missing=self.missing,
                             templates=dict(self.templates), stuck=stuck,
                             missing_pods=list(self.missing_pods) or None)


class JobTracker:
    """Per binding: the placeholder job of each expected sandbox pod (see the module docstring)."""

    def __init__(self, templates: tuple[str, ...], scheduler_name: str | None) -> None:
        self.templates = templates
        self.scheduler_name = scheduler_name
        self.view: JobView | None = None
        self._pods: dict[str, _Entry] = {}
        self._by_name: dict[str, set[str]] = {}
        self._matched = 0
        self._per_template: Counter[int] = Counter()
        self._stuck: dict[str, _Entry] = {}
        self._unmatched: dict[str, _Entry] = {}
        self._waiting: list[tuple[float, str]] = []   # unmatched pods by creation (lazy deletion)
        self._missing: set[str] = set()
        self._version = 0
        self._cache: tuple[tuple[int, int], JobSummary] | None = None

    def __len__(self) -> int:
        return len(self._pods)

    def expects(self, pod: PodRecord) -> bool:
        """A pod whose placeholder job should exist: placed by our scheduler, not finished."""
        return (self.scheduler_name is not None and pod.scheduler_name == self.scheduler_name
                and pod.phase not in ("Succeeded", "Failed"))

    def apply(self, kind: str, pod: PodRecord) -> bool:
        """One pod event; True when what the summary says may have changed."""
        key = pod.uid or pod.ref
        old = self._pods.get(key)
        if kind == "DELETED" or not self.expects(pod):
            if old is None:
                return False
            self._remove(key, old)
            return True
        names, created = job_names(self.templates, pod), pod.created_ts or 0.0
        if old is not None:
            if old.names == names and old.created == created:
                return False
            self._remove(key, old)
        entry = _Entry(pod.ref, pod.namespace, created, names)
        for n in names:
            if n:
                self._by_name.setdefault(n, set()).add(key)
        self._pods[key] = entry
        self._judge(entry)
        self._count(key, entry, +1)
        return True

    def set_view(self, view: JobView | None, names: Iterable[str] | None = None) -> bool:
        """A new job list. `names`: those whose facts changed since the current view (None: maybe
        all, e.g. the first list or one after an outage): only their pods are judged again."""
        if view is None or self.view is None or names is None:
            had = self.view is not None or view is not None
            self._matched, self._per_template, self._stuck = 0, Counter(), {}
            self._unmatched, self._waiting, self._missing = {}, [], set()
            self.view = view
            for key, entry in self._pods.items():
                self._judge(entry)
                self._count(key, entry, +1)
            return had
        self.view = view
        keys = {k for n in names for k in self._by_name.get(n, ())}
        for key in keys:
            entry = self._pods[key]
            self._count(key, entry, -1)
            self._judge(entry)
            self._count(key, entry, +1)
        return bool(keys)

    def due(self, cutoff: float) -> bool:
        """Would `summary(cutoff)` find a pod newly missing? (cheap: the heap's top)"""
        while self._waiting and self._waiting[0][1] not in self._unmatched:
            heapq.heappop(self._waiting)
        return bool(self._waiting) and self._waiting[0][0] <= cutoff

    def _judge(self, entry: _Entry) -> None:
        entry.match, entry.fact = None, None
        if self.view is None:
            return
        for i, n in enumerate(entry.names):
            fact = self.view.jobs.get(n) if n else None
            if fact is not None:
                entry.match, entry.fact = i, fact
                return

    def _count(self, key: str, e: _Entry, sign: int) -> None:
        self._version += 1
        if self.view is None:
            return
        if e.fact is not None:
            self._matched += sign
            self._per_template[e.match] += sign  # type: ignore[index]
            if e.fact.stuck:
                if sign > 0:
                    self._stuck[key] = e
                else:
                    self._stuck.pop(key, None)
        elif sign > 0:
            self._unmatched[key] = e
            heapq.heappush(self._waiting, (e.created, key))
        else:
            self._unmatched.pop(key, None)
            self._missing.discard(key)

    def _remove(self, key: str, e: _Entry) -> None:
        self._count(key, e, -1)
        for n in e.names:
            keys = self._by_name.get(n)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_name[n]
        del self._pods[key]

    def summary(self, cutoff: float) -> JobSummary | None:
        """Counts and examples; None without a job list. Pods unmatched since before `cutoff` (the
        list's time minus the persistence seconds) are missing from then on."""
        if self.view is None:
            return None
        while self._waiting and self._waiting[0][0] <= cutoff:
            created, key = heapq.heappop(self._waiting)
            e = self._unmatched.get(key)
            if e is not None and e.created == created and key not in self._missing:
                self._missing.add(key)
                self._version += 1
        stamp = (self._version, len(self._missing))
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        oldest = min(self._stuck.values(), key=lambda e: (e.fact.since or 0.0, e.ref), default=None)  # type: ignore[union-attr]
        missing = heapq.nsmallest(MISSING_PODS_SHOWN, (self._unmatched[k].ref for k in self._missing))
        example = None
        if self._missing:
            first = min((self._unmatched[k] for k in self._missing), key=lambda e: (e.created, e.ref))
            example = (first.ref, tuple(n for n in first.names if n))
        result = JobSummary(
            matched=self._matched, pending=len(self._stuck), missing=len(self._missing),
            templates={self.templates[i]: n for i, n in sorted(self._per_template.items()) if n > 0},
            stuck=(oldest.ref, oldest.fact) if oldest is not None and oldest.fact is not None else None,
            missing_pods=tuple(missing), missing_example=example)
        self._cache = (stamp, result)
        return result


# ---------------------------------------------------------------- the verdict on the jobs

# Slurm's usual pending reasons and what usually ends them (squeue's %R).
_HINTS = {
    "PartitionDown": "the partition is down (see SlurmReady): a Slurm admin brings it UP",
    "PartitionInactive": "the partition is inactive: a Slurm admin sets it UP",
    "PartitionConfig": "the job asks what the partition does not allow (size, time, account): check spec.partition "
    "and the pinned annotations against `scontrol show partition`",
    "PartitionNodeLimit": "the job asks for more nodes than the partition allows",
    "PartitionTimeLimit": "the job's time limit exceeds the partition's",
    "ReqNodeNotAvail": "the nodes it may use are down, drained or reserved (`sinfo -R`)",
    "JobHeldUser": "the job is held: `scontrol release ID`",
    "JobHeldAdmin": "a Slurm admin held the job: `scontrol release ID`",
    "Resources": "no node has room for it: shared NodeSets need lower slurmd requests, or the cluster is full",
    "Priority": "jobs of higher priority are ahead of it",
    "InvalidAccount": "the account (sunk.coreweave.com/account) does not exist for the job's user",
    "InvalidQOS": "the QoS (sunk.coreweave.com/qos) does not exist or the user may not use it",
    "QOSNotAllowed": "the QoS (sunk.coreweave.com/qos) is not allowed in the partition",
    "AccountNotAllowed": "the account (sunk.coreweave.com/account) is not allowed in the partition",
    "BadConstraints": "no node has the features sunk.coreweave.com/constraint asks for",
    "Dependency": "it waits for another job",
    "BeginTime": "its start time is in the future",
}


def hint(reason: str) -> str:
    return _HINTS.get(reason, "see `scontrol show job ID` for why Slurm keeps it pending")


def jobs_condition(s: JobSummary) -> tuple[Status, PlacementVerified, str] | None:
    """PlacementVerified from the placeholder jobs when they show a problem, else None."""
    if s.stuck is not None:
        pod, f = s.stuck
        more = f" ({s.pending - 1} more pod(s) with a stuck job)" if s.pending > 1 else ""
        detail = f": {f.description}" if f.description and f.description != f.reason else ""
        return "False", PlacementVerified.SLURM_JOB_PENDING, (
            f"sandbox pod {pod}: its placeholder job {f.job_id} ({f.name}) has been PENDING for {f.reason}{detail} "
            f"since {iso(f.since or 0)}{more}: {hint(f.reason).replace('ID', str(f.job_id))}")
    if s.missing_example is not None:
        pod, names = s.missing_example
        more = f" ({s.missing - 1} more)" if s.missing > 1 else ""
        return "False", PlacementVerified.SLURM_JOB_MISSING, (
            f"sandbox pod {pod} has no placeholder job in Slurm{more} (job names tried: {', '.join(names)}): the "
            "SUNK scheduler has not submitted one. Check that the scheduler watches its namespace (ScopeSynced), the "
            "pod's events (the scheduler rejects bad annotations), and spec.slurm.restAPI.jobNameTemplates")
    return None


def jobs_note(s: JobSummary) -> str:
    """What Verified (or an Unknown verdict) adds about the jobs."""
    if not s.matched:
        return "; Slurm: no pod placed by the scheduler yet"
    templates = ", ".join(f"{t!r} ×{n}" for t, n in s.templates.items())
    return f"; Slurm: {s.matched} placeholder job(s) found ({templates})"
