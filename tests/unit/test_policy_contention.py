"""Another owner of the runner policy, decided in core: the tug-of-war (core.policy_contention through
core.policy_decide), spec.policy.management Observe, and the fragment handed to that owner
(core.policy_handoff). A Terraform-like owner is simulated as what it does to the document: at each
apply its whole policy comes back, with a fresh etag."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.events import EventReason
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.api.status import OwnedPath, PolicyContention
from sunk_sandbox_operator.core import policy as pol
from sunk_sandbox_operator.core import policy_contention as pc
from sunk_sandbox_operator.core import policy_decide as pd
from sunk_sandbox_operator.core import policy_handoff as ho

PARTITION = 'base.metadata.annotations["sunk.coreweave.com/partition"]'
# What the other owner (Terraform) wants: its whole policy, without the operator's keys.
THEIRS = {"base": {"metadata": {"labels": {"team": "ml"}}}, "constraints": {"network": {"egress": "deny"}}}


def spec(**overrides: Any):
    return parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "partition": "sandboxes",
                       "sandboxNamespaces": {"names": ["ds-*"]}, **overrides})


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(1_800_000_000 + t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def carrying(doc: dict | None) -> dict:
    """`doc` with the operator's keys added (what the other owner writes once it carries them)."""
    out = copy.deepcopy(doc) or {}
    out.setdefault("base", {}).setdefault("spec", {})["schedulerName"] = "sched"
    out["base"].setdefault("metadata", {}).setdefault("annotations", {})["sunk.coreweave.com/partition"] = "sandboxes"
    return out


class Runner:
    """The runner as the operator sees it across reconciles: the policy, its etag, status.policy, the
    record's owned paths and etag. `decide` runs one reconcile's decision and applies what it says."""

    def __init__(self, doc: dict | None, s=None, cfg: pc.Settings = pc.Settings(3, 100.0)) -> None:
        self.doc, self.etag, self.spec, self.cfg = copy.deepcopy(doc), 1, s or spec(), cfg
        self.section: dict = {}
        self.owned: list = []
        self.ours: str | None = None
        self.writes: list[float] = []
        self.decisions: list[pd.PolicyDecision] = []
        self.request: str | None = None

    def apply(self, doc: dict | None) -> None:
        """The other owner writes its whole policy (a fresh etag)."""
        self.doc, self.etag = copy.deepcopy(doc), self.etag + 1

    def memory(self) -> PolicyContention | None:
        raw = self.section.get("contention")
        return PolicyContention.model_validate(raw) if raw else None

    def decide(self, t: float) -> pd.PolicyDecision:
        obs = pd.PolicyObservation(self.spec, "sched", copy.deepcopy(self.doc), str(self.etag), list(self.owned),
                                   self.memory(), self.request, self.ours, self.cfg)
        d = pd.decide(obs, iso(t))
        self.decisions.append(d)
        if d.write is not None:
            self.doc, self.etag = copy.deepcopy(d.write), self.etag + 1
            self.ours, self.owned = str(self.etag), list(d.owned)
            report = pd.written(obs, d, str(self.etag), iso(t))
            self.writes.append(t)
        else:
            assert d.report is not None
            report = d.report
            if report.status == "True" and "owned" in report.section:  # the record, as the controller repairs it
                self.owned = [OwnedPath.model_validate(o) for o in report.section["owned"]]
                self.ours = str(self.etag)
        self.section = pd.section(self.section, report.section)
        return d


# ---------------------------------------------------------------- the tug-of-war


def test_a_terraform_like_owner_is_fought_n_times_then_left_alone_and_the_fragment_is_reported() -> None:
    r = Runner(THEIRS)
    assert r.decide(0).write is not None and r.writes == [0]          # the first merge: not a correction
    for t in (10, 20, 30):
        r.apply(THEIRS)
        d = r.decide(t)
        assert d.write is not None and d.drift and r.section["contention"]["corrections"][-1] == iso(t)
    r.apply(THEIRS)
    d = r.decide(40)                                                  # the 4th removal within 100 s: stop
    assert d.write is None and (d.report.status, d.report.reason) == ("False", "PolicyManagedElsewhere")
    assert d.event is not None and d.event[0] is EventReason.POLICY_WRITES_STOPPED and "runner r" in d.event[1]
    msg = d.report.message
    assert "4 time(s)" in msg and "base.spec.schedulerName removed" in msg and f"{PARTITION} removed" in msg
    assert '{"base":{"spec":{"schedulerName":"sched"},"metadata":{"annotations":{"sunk.coreweave.com/partition":' \
           '"sandboxes"}}}}' in msg
    assert 'policy = { base = { spec = { scheduler_name = "sched" }, metadata = { annotations = ' \
           '{ "sunk.coreweave.com/partition" = "sandboxes" } } } }' in msg
    assert "lifecycle { ignore_changes = [policy] }" in msg and "sunksandbox.dev/reconcile-requested-at" in msg
    assert r.section["contention"]["stoppedTime"] == iso(40)
    # While the other owner keeps its policy: read, reported, never written, the event not posted again.
    for t in (50, 60, 500, 5000):
        r.apply(THEIRS)
        d = r.decide(t)
        assert d.write is None and d.report.reason == "PolicyManagedElsewhere" and d.event is None
        assert d.report.message == msg                                # the same words: no status churn
    assert r.writes == [0, 10, 20, 30]
    # The other owner now carries the keys: nothing to write, Synced, the memory cleared.
    r.apply(carrying(THEIRS))
    d = r.decide(6000)
    assert d.write is None and (d.report.status, d.report.reason) == ("True", "Synced")
    assert "other owner carries" in d.report.message and "contention" not in r.section
    # ... and what it carries is its own: a Restore would leave it (previous = the value found).
    owned = {o["path"]: o for o in r.section["owned"]}
    assert owned["base.spec.schedulerName"]["previous"] == "sched" and owned[PARTITION]["previous"] == "sandboxes"
    assert pol.restore(r.doc, [OwnedPath.model_validate(o) for o in r.section["owned"]]) == r.doc


def test_corrections_spread_wider_than_the_window_never_stop() -> None:
    r = Runner(THEIRS)
    r.decide(0)
    for t in range(100, 2000, 101):
        r.apply(THEIRS)
        assert r.decide(t).write is not None
    assert len(r.section["contention"]["corrections"]) <= 3


def test_a_window_of_zero_never_stops() -> None:
    r = Runner(THEIRS, cfg=pc.Settings(3, 0.0))
    r.decide(0)
    for t in range(1, 20):
        r.apply(THEIRS)
        d = r.decide(t)
        assert d.write is not None and d.drift
    assert "contention" not in r.section


def test_a_new_reconcile_request_hands_the_policy_back_and_counting_starts_afresh() -> None:
    r = Runner(THEIRS, cfg=pc.Settings(1, 100.0))
    r.request = "2026-12-01T00:00:00Z"            # an old request, handled long ago
    r.decide(0)
    r.apply(THEIRS)
    assert r.decide(1).write is not None          # correction 1
    r.apply(THEIRS)
    assert r.decide(2).write is None              # stopped, at request ...00Z
    assert r.section["contention"]["stoppedRequest"] == "2026-12-01T00:00:00Z"
    assert r.decide(3).write is None              # the same request value: still stopped
    r.request = "2026-12-02T00:00:00Z"            # kubectl annotate ... reconcile-requested-at=$(date)
    d = r.decide(4)
    assert d.write is not None and "contention" not in r.section
    r.apply(THEIRS)
    assert r.decide(5).write is not None          # a fresh count: one correction again
    r.apply(THEIRS)
    d = r.decide(6)
    assert d.write is None and r.section["contention"]["stoppedRequest"] == "2026-12-02T00:00:00Z"


def test_a_spec_change_or_a_first_write_is_not_a_removal() -> None:
    r = Runner(THEIRS, cfg=pc.Settings(0, 100.0))  # the very first removal would stop
    assert r.decide(0).write is not None
    r.spec = spec(partition="other")
    d = r.decide(1)
    assert d.write is not None and not d.drift and "contention" not in r.section


def test_a_removal_under_our_own_etag_is_not_another_writer() -> None:
    s = spec()
    want = pol.desired_fields(s, "sched")
    first = pol.merge({}, want)
    obs = pd.PolicyObservation(s, "sched", {}, "7", first.owned, None, None, "7", pc.Settings(0, 100.0))
    d = pd.decide(obs, iso(0))
    assert d.write is not None and not d.drift


def test_values_of_a_pending_record_are_not_a_removal() -> None:
    """A write-ahead record whose write lost a race (or died) claims values the policy never held:
    the retry's write is a first write, not a correction."""
    s = spec()
    owned = pol.merge({}, pol.desired_fields(s, "sched")).owned
    obs = pd.PolicyObservation(s, "sched", THEIRS, "9", owned, None, None, None, pc.Settings(0, 100.0),
                               confirmed=False)
    d = pd.decide(obs, iso(0))
    assert d.write is not None and not d.drift and d.contention is None


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 4), gaps=st.lists(st.floats(0.5, 300.0), min_size=1, max_size=25))
def test_writes_stay_within_n_per_window_and_the_stop_is_never_early(n: int, gaps: list[float]) -> None:
    window = 100.0
    r = Runner(THEIRS, cfg=pc.Settings(n, window))
    r.decide(0)
    t, stopped_at = 0.0, None
    for gap in gaps:
        t += gap
        r.apply(THEIRS)
        before = [c for c in r.writes[1:] if t - window < c <= t]   # corrections within the window ending now
        d = r.decide(t)
        if stopped_at is not None:
            assert d.write is None                                   # stopped stays stopped
        elif d.write is None:
            assert len(before) >= n                                  # never stops early
            stopped_at = t
        else:
            assert len(before) < n                                   # stops as soon as due
    corrections = r.writes[1:]
    for c in corrections:                                            # at most n corrections in any window
        assert sum(1 for x in corrections if c - window < x <= c) <= max(n, 0)


# ---------------------------------------------------------------- spec.policy.management: Observe


def test_observe_management_verifies_and_never_writes() -> None:
    s = spec(policy={"management": "Observe"}, slurm={"qos": "normal"})
    d = pd.decide(pd.PolicyObservation(s, "sched", THEIRS, "1", []), iso(0))
    assert d.write is None and (d.report.status, d.report.reason) == ("False", "PolicyKeysMissing")
    msg = d.report.message
    assert 'base.spec.schedulerName (wants "sched")' in msg and f'{PARTITION} (wants "sandboxes")' in msg
    assert 'base.metadata.annotations["sunk.coreweave.com/qos"] (wants "normal")' in msg
    assert '"schedulerName":"sched"' in msg and 'scheduler_name = "sched"' in msg and "nothing is written" in msg
    assert "owned" not in d.report.section
    other = carrying(THEIRS)
    other["base"]["metadata"]["annotations"]["sunk.coreweave.com/qos"] = "low"
    d = pd.decide(pd.PolicyObservation(s, "sched", other, "2", []), iso(1))
    assert d.report.reason == "PolicyKeysMissing"
    assert 'annotations["sunk.coreweave.com/qos"] (is "low", wants "normal")' in d.report.message
    assert "schedulerName" not in d.report.message.split("Missing:")[1].split(". Have")[0]
    other["base"]["metadata"]["annotations"]["sunk.coreweave.com/qos"] = "normal"
    d = pd.decide(pd.PolicyObservation(s, "sched", other, "3", []), iso(2))
    assert d.write is None and (d.report.status, d.report.reason) == ("True", "Synced")
    assert "verified, never written" in d.report.message and "owned" not in d.report.section


def test_observe_management_wins_over_a_stopped_fight_and_clears_it() -> None:
    s = spec(policy={"management": "Observe"})
    memory = PolicyContention(corrections=[iso(0)], removed=["x removed"], stopped_time=iso(1))
    d = pd.decide(pd.PolicyObservation(s, "sched", THEIRS, "1", [], memory), iso(2))
    assert d.report.reason == "PolicyKeysMissing" and d.report.section["contention"] is None


def test_restore_is_for_a_policy_the_binding_writes() -> None:
    stopped = PolicyContention(stopped_time=iso(0))
    assert pc.may_restore(spec(), None) and pc.may_restore(spec(), PolicyContention(corrections=[iso(0)]))
    assert not pc.may_restore(spec(), stopped)
    assert not pc.may_restore(spec(policy={"management": "Observe"}), None)


# ---------------------------------------------------------------- the fragment


def _hcl_unquote(text: str) -> str:
    """An HCL quoted string read back (the HCL spec's escapes and its literal `$${` / `%%{`)."""
    assert text[0] == text[-1] == '"'
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt == "u":
                out.append(chr(int(body[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append({"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}[nxt])
            i += 2
            continue
        assert ch != '"', "an unescaped quote inside the string"
        if body.startswith("${", i) or body.startswith("%{", i):
            raise AssertionError("a live interpolation or directive")
        if body.startswith("$${", i) or body.startswith("%%{", i):
            out.append(ch + "{")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@given(st.text(max_size=60))
def test_hcl_strings_read_back_as_written_and_never_interpolate(text: str) -> None:
    assert _hcl_unquote(ho.hcl_string(text)) == text


def test_the_fragment_holds_every_pinned_key_exactly() -> None:
    s = spec(slurm={"account": "ml", "qos": "normal", "constraint": "cpu&avx", "exclusive": "user",
                    "userId": "1000", "groupId": "1000"})
    want = pol.desired_fields(s, "slurm-scheduler")
    assert json.loads(ho.as_json(want)) == {"base": {"spec": {"schedulerName": "slurm-scheduler"}, "metadata": {
        "annotations": {f"sunk.coreweave.com/{k}": v for k, v in {
            "account": "ml", "qos": "normal", "constraint": "cpu&avx", "exclusive": "user", "user-id": "1000",
            "group-id": "1000", "partition": "sandboxes"}.items()}}}}
    hcl = ho.as_hcl(want)
    assert hcl.startswith("policy = { base = { spec = { scheduler_name = ")
    assert '"sunk.coreweave.com/user-id" = "1000"' in hcl and hcl.count("{") == hcl.count("}")
    assert ho.snake("deniedAnnotationPrefixes") == "denied_annotation_prefixes" and ho.snake("base") == "base"


def test_the_messages_stay_bounded_with_a_hostile_scheduler_name() -> None:
    name = "s" * 100_000 + '"${x}'
    want = pol.desired_fields(spec(), name)
    assert len(ho.as_json(want)) < ho.MAX_CHARS + 100 and len(ho.as_hcl(want)) < ho.MAX_CHARS + 100
    memory = PolicyContention(corrections=[iso(0)] * 3, removed=[f"p{i} removed" for i in range(50)],
                              stopped_time=iso(1))
    assert len(pc.managed_elsewhere(want, memory, pc.Settings())) < 3 * ho.MAX_CHARS
    assert len(pc.keys_missing(want, {})) < 3 * ho.MAX_CHARS
    assert "and 44 more" in pc.managed_elsewhere(want, memory, pc.Settings())


@pytest.mark.parametrize("found,shown", [({"base": {"spec": {"schedulerName": "default"}}}, 'changed to "default"'),
                                         ({"base": {"spec": {"schedulerName": None}}}, "removed"),
                                         ({}, "removed")])
def test_what_was_removed_is_named(found: dict, shown: str) -> None:
    want = pol.desired_fields(spec(), "sched")
    owned = pol.merge({}, want).owned
    assert f"base.spec.schedulerName {shown}" in pc.removed(found, want, owned)
    assert not re.search("schedulerName", " ".join(pc.removed(pol.merge({}, want).policy, want, owned)))
