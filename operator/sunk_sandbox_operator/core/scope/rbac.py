"""May the scheduler's ServiceAccount watch and bind pods in the listed namespaces? (pure)

What the SubjectAccessReviews said (`Permits`), which to ask next (`plan_reviews`: one cluster-wide
first, then per namespace), and what the answers leave (`permits_after`).

A namespace holding our grant RoleBinding needs no review when the granted ClusterRole's rules
cover what the scheduler needs (`role_covers`, by RBAC's own matching over the role as read): RBAC
only adds, so that RoleBinding alone permits it there. With `grantClusterRole` at 5,000 namespaces
that is one ClusterRole read instead of 10,000 reviews after the 5,000 creates.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

DENIED_RECHECK_SECONDS = 5.0  # how soon a grant to a denied namespace is seen while wakes keep coming

# What a secondary scheduler needs in a namespace it watches (kube-scheduler's role is the model):
# (verb, resource, subresource) in the core API group.
SCHEDULER_NEEDS = (("watch", "pods", ""), ("create", "pods", "binding"))


@dataclass(frozen=True)
class Permits:
    """What the SubjectAccessReviews said about the scheduler's ServiceAccount `sa`."""

    sa: tuple[str, str] | None = None
    cluster: bool | None = None            # everywhere (one cluster-wide review); None: not asked yet
    permitted: frozenset[str] = frozenset()  # listed namespaces where it may watch and bind pods
    denied: frozenset[str] = frozenset()   # ... where it may not
    denied_asked: float = float("-inf")    # when the denied ones were last asked again (monotonic)


@dataclass(frozen=True)
class Reviews:
    """SubjectAccessReviews in two rounds: the cluster-wide one first (`cluster`), then `namespaces`
    when it (or the remembered answer) denies. `before`: the answers still valid; `after`: those
    pruned to what is listed, which the namespace round starts from; `covered`: permitted by our
    RoleBinding there (if it still exists after this sync), not asked."""

    sa: tuple[str, str] | None = None      # None: no ServiceAccount to check
    cluster: bool = False
    namespaces: tuple[str, ...] = ()
    live: tuple[str, ...] = ()             # the listed namespaces the binding matches that exist
    before: Permits = field(default_factory=Permits)
    after: Permits = field(default_factory=Permits)
    covered: frozenset[str] = frozenset()


def _rule_allows(rule: Mapping[str, Any], verb: str, resource: str, subresource: str) -> bool:
    """RBAC's rule matching (rbac/v1 helpers: VerbMatches, APIGroupMatches, ResourceMatches) for one
    request on a whole collection: a rule limited to resourceNames never counts."""
    if rule.get("resourceNames"):
        return False
    groups, verbs, resources = (rule.get(k) or [] for k in ("apiGroups", "verbs", "resources"))
    want = f"{resource}/{subresource}" if subresource else resource
    return (("" in groups or "*" in groups) and (verb in verbs or "*" in verbs)
            and (want in resources or "*" in resources or (bool(subresource) and f"*/{subresource}" in resources)))


def role_covers(rules: Iterable[Any] | None) -> bool:
    """Do a ClusterRole's rules (None: it could not be read) grant everything the scheduler needs?
    An aggregated role not aggregated yet has no rules: False, and the reviews decide."""
    good = [r for r in rules or () if isinstance(r, Mapping)]
    return all(any(_rule_allows(r, *need) for r in good) for need in SCHEDULER_NEEDS)


def plan_reviews(sa: tuple[str, str], p: Permits, *, periodic: bool, mine: list[str], live: tuple[str, ...],
                 covered: frozenset[str], now: float) -> Reviews:
    """May the scheduler's ServiceAccount watch pods and bind them in every listed namespace the
    binding matches (where its sandboxes are; what else the list holds is not this binding's to check)?
    One cluster-wide review first (at a resync, or when not answered yet); else one per namespace not
    answered and not `covered`: a confirmed one is not asked again while it stays listed, a denied one
    at a resync or at most every DENIED_RECHECK_SECONDS (not at every sync of a burst: that would ask
    about every denied namespace once per write; the retry with backoff brings a wake when nothing else
    does)."""
    if not sa[1]:
        return Reviews(before=p, after=p)
    p = p if p.sa == sa else Permits(sa=sa, denied_asked=p.denied_asked)
    ask = periodic or p.cluster is None
    if not ask and p.cluster:
        return Reviews(sa=sa, before=p, after=p)
    again = periodic or now >= p.denied_asked + DENIED_RECHECK_SECONDS
    after = replace(p, permitted=p.permitted & frozenset(mine), denied=p.denied & frozenset(live),
                    denied_asked=now if again else p.denied_asked)
    todo = tuple(ns for ns in live if ns not in covered and ns not in after.permitted
                 and (again or ns not in after.denied))
    return Reviews(sa=sa, cluster=ask, namespaces=todo, live=live, before=p, after=after,
                   covered=covered & frozenset(live))


def everywhere(reviews: Reviews, cluster: bool | None) -> bool | None:
    """The cluster-wide answer in effect: asked now (`cluster`; None: no answer came) or remembered."""
    if reviews.sa is None:
        return None
    return cluster if reviews.cluster else reviews.before.cluster


def second_round(reviews: Reviews, cluster: bool | None) -> tuple[str, ...]:
    """The per-namespace reviews to ask, given the cluster-wide answer (None: not asked, or none
    came): none when it allows everywhere or could not say."""
    return reviews.namespaces if everywhere(reviews, cluster) is False else ()


def permits_after(reviews: Reviews, cluster: bool | None, answers: Mapping[str, bool | None],
                  granted: frozenset[str] | None) -> Permits:
    """The answers kept: the cluster-wide one, each namespace's, and the covered namespaces that hold
    our RoleBinding after the wake (`granted`) as permitted."""
    every = everywhere(reviews, cluster)
    if every is None:
        return reviews.before  # nothing to check, or unknown this time: asked again at the next sync
    if every:
        return replace(reviews.before, cluster=True)
    permitted, denied = set(reviews.after.permitted), set(reviews.after.denied)
    for ns in reviews.namespaces:
        allowed = answers.get(ns)
        if allowed is True:
            permitted.add(ns)
            denied.discard(ns)
        elif allowed is False:
            denied.add(ns)
    held = reviews.covered & (granted or frozenset())
    permitted |= held
    denied -= held
    return replace(reviews.after, cluster=False, permitted=frozenset(permitted), denied=frozenset(denied))
