"""The shared slurmrestd poller's decision per wake, pure (the shell is controller/slurm_poll.py).

One round: the shell picks whose token to use (`token_of`), reads the job list and the partitions
with it (`since` says from when) and folds what it met into a `Round`; `decide` turns the poller's
memory, its subscribers and that round into one `Decision` — the new memory, the job facts to
publish (or to drop), which bindings to wake and why, the token outcome that changed, and when to
poll again (the regular interval, or attempt n of the one backoff, controller/retry.py).

- a refused token (or its Secret gone) drops its binding to REFUSED and wakes it (its reconcile says
  why); the next round tries another subscriber's token;
- Slurm failing drops every view once (the placement verdict goes back to the policy alone), wakes
  every subscriber once (their own checks report SlurmUnreachable) and backs off;
- an answer advances the job facts (a PENDING reason becomes `stuck` once it persisted) and wakes
  the bindings that waited for Slurm to answer, and those whose pinned partition changed state.

`update_time` is in slurmctld's seconds: `since` lags our clock by the skew measured with GET /diag
at every full read (every FULL_READ_POLLS polls, which also bounds what a missed change could cost),
or by SKEW_MARGIN when it is not known.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .slurm import Job, JobFact, Pending, advance, changed

FULL_READ_POLLS = 30       # every 30th poll reads without update_time (5 min at the default 10 s)
SKEW_MARGIN = 30           # seconds update_time lags when slurmctld's clock is not known


class TokenOutcome(StrEnum):
    """What a binding's own check (controller/slurm.py) found of its token, for the poller."""

    UNCHECKED = "unchecked"
    VERIFIED = "verified"        # it passed Slurm's authentication: the binding sees the job list
    UNREACHABLE = "unreachable"  # Slurm did not answer: usable, once it does
    REFUSED = "refused"          # not sent, or refused: never used by the poller


class Met(StrEnum):
    """What one round met."""

    NO_TOKEN = "no-token"        # no subscriber's token may be used
    REFUSED = "refused"          # the token used was refused (or its Secret is gone)
    FAILED = "failed"            # Slurm did not answer as expected
    ANSWERED = "answered"


@dataclass(frozen=True)
class Subscriber:
    """A binding naming this poller's slurmrestd, as its own last check left it."""

    key: Hashable
    outcome: TokenOutcome
    partition: str | None = None          # spec.partition
    partition_seen: str | None = None     # its state at the binding's check ("": not found; None: not checked)


@dataclass(frozen=True)
class Round:
    """What the shell met, reading with `token`'s binding's JWT from `started` (wall-clock epoch)."""

    met: Met
    token: Hashable | None = None
    started: float = 0.0
    skew: float | None = None                  # measured this round (full reads only)
    jobs: Mapping[str, Job] | None = None      # None: unchanged since `since` (or not read)
    partitions: Mapping[str, str] | None = None
    error: str = ""


@dataclass(frozen=True)
class PollMemory:
    polls: int = 0
    failures: int = 0
    reachable: bool | None = None
    update_time: int | None = None
    skew: float | None = None
    jobs: Mapping[str, Job] = field(default_factory=dict)         # the last list read
    pending: Mapping[int, Pending] = field(default_factory=dict)  # PENDING reasons and since when
    partitions: Mapping[str, str] = field(default_factory=dict)
    facts: Mapping[str, JobFact] | None = None                    # what was published (None: nothing)


@dataclass(frozen=True)
class Decision:
    memory: PollMemory
    met: Met
    publish: bool = False                      # show `memory.facts` (None: drop every view)
    names: frozenset[str] | None = None        # the job names whose facts changed (None: maybe all)
    wake: frozenset[Hashable] = frozenset()
    outcome: tuple[Hashable, TokenOutcome] | None = None   # a binding's token outcome that changed
    partition_seen: Mapping[Hashable, str] = field(default_factory=dict)
    announce: str | None = None                # Slurm just stopped answering: said once
    backoff: int | None = None                 # None: the regular interval; else the backoff's attempt


def full_read(memory: PollMemory) -> bool:
    return memory.polls % FULL_READ_POLLS == 0


def since(memory: PollMemory) -> int | None:
    """The `update_time` of this round (None: a full read)."""
    return None if full_read(memory) else memory.update_time


def token_of(subscribers: Sequence[Subscriber]) -> Hashable | None:
    """Whose token the round uses: a verified one first, else one waiting for Slurm to answer
    (sorted by key: the same one every round while it keeps passing)."""
    for wanted in (TokenOutcome.VERIFIED, TokenOutcome.UNREACHABLE):
        found = sorted((s for s in subscribers if s.outcome is wanted), key=lambda s: str(s.key))
        if found:
            return found[0].key
    return None


def decide(memory: PollMemory, subscribers: Sequence[Subscriber], r: Round, *, now: float, now_wall: float,
           pending_seconds: float, pending_polls: int) -> Decision:
    """The one decision of a wake (see the module docstring)."""
    if r.met is Met.NO_TOKEN:
        return Decision(memory, r.met)  # their next reconcile checks their tokens again
    if r.met is Met.REFUSED:
        if r.token is None:
            return Decision(memory, r.met)
        return Decision(memory, r.met, outcome=(r.token, TokenOutcome.REFUSED), wake=frozenset({r.token}))
    if r.met is Met.FAILED:
        failures = memory.failures + 1
        if memory.reachable is False:
            return Decision(replace(memory, failures=failures), r.met, backoff=failures)
        return Decision(replace(memory, failures=failures, reachable=False, facts=None), r.met, publish=True,
                        wake=frozenset(s.key for s in subscribers), announce=r.error, backoff=failures)
    skew = r.skew if full_read(memory) else memory.skew
    jobs = r.jobs if r.jobs is not None else memory.jobs
    pending, facts = advance(memory.pending, jobs, now=now, now_wall=now_wall, seconds=pending_seconds,
                             polls=pending_polls)
    partitions = r.partitions if r.partitions is not None else memory.partitions
    new = PollMemory(polls=memory.polls + 1, failures=0, reachable=True, skew=skew,
                     update_time=int(r.started + (skew if skew is not None else -SKEW_MARGIN)) - 1,
                     jobs=jobs, pending=pending, partitions=partitions, facts=facts)
    names = frozenset(changed(memory.facts, facts)) if memory.facts is not None else None
    recovered = memory.reachable is not True
    wake: set[Hashable] = set()
    seen: dict[Hashable, str] = {}
    for s in subscribers:
        if recovered and s.outcome is TokenOutcome.UNREACHABLE:
            wake.add(s.key)  # Slurm answers again (the token just used among them): check again, once
        elif s.outcome is TokenOutcome.VERIFIED and s.partition is not None and s.partition_seen is not None:
            now_state = partitions.get(s.partition, "")
            if now_state != s.partition_seen:
                wake.add(s.key)  # its partition moved: its reconcile checks it
                seen[s.key] = now_state  # one wake per change; that check records it again
    token = next((s for s in subscribers if s.key == r.token), None)
    outcome = (token.key, TokenOutcome.VERIFIED) if token is not None and token.outcome is TokenOutcome.UNREACHABLE \
        else None
    return Decision(new, r.met, publish=True, names=names, wake=frozenset(wake), outcome=outcome, partition_seen=seen)

