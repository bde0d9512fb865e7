"""Scope shell without a server: the coalescing Syncer and which signals schedule a sync."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sunk_sandbox_operator import scope
from sunk_sandbox_operator.config import Config
from sunk_sandbox_operator.namespaces import NAMESPACES
from sunk_sandbox_operator.runtime import Registry


def run(coro):
    return asyncio.run(coro)


class Recorder:
    def __init__(self, duration: float = 0.0) -> None:
        self.starts: list[float] = []
        self.duration = duration
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self) -> None:
        self.starts.append(asyncio.get_running_loop().time())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.duration)
        self.in_flight -= 1


def test_signals_within_the_window_make_one_run() -> None:
    async def main():
        rec = Recorder()
        s = scope.Syncer(rec, lambda: 0.05)
        t0 = asyncio.get_running_loop().time()
        for _ in range(100):
            s.signal()
            await asyncio.sleep(0)
        await asyncio.sleep(0.15)
        return rec, t0

    rec, t0 = run(main())
    assert len(rec.starts) == 1
    assert rec.starts[0] - t0 >= 0.045  # waited for the window


def test_urgent_signal_skips_the_window() -> None:
    async def main():
        rec = Recorder()
        s = scope.Syncer(rec, lambda: 10.0)
        t0 = asyncio.get_running_loop().time()
        s.signal()
        await asyncio.sleep(0.01)
        s.signal(urgent=True)
        await asyncio.sleep(0.05)
        s.cancel()
        return rec, t0

    rec, t0 = run(main())
    assert len(rec.starts) == 1 and rec.starts[0] - t0 < 0.05


def test_signals_during_a_run_cause_exactly_one_more_run_never_two_at_once() -> None:
    async def main():
        rec = Recorder(duration=0.1)
        s = scope.Syncer(rec, lambda: 0.01)
        s.signal()
        await asyncio.sleep(0.05)  # the first run is in flight
        for _ in range(20):
            s.signal()
        await asyncio.sleep(0.4)
        return rec

    rec = run(main())
    assert len(rec.starts) == 2
    assert rec.max_in_flight == 1


def test_first_event_is_the_earliest_unfolded_signal() -> None:
    async def main():
        s = scope.Syncer(Recorder(), lambda: 10.0)
        s.signal(at=5.0)
        s.signal(at=3.0)
        s.signal(at=7.0)
        first = s.take_first_event()
        again = s.take_first_event()
        s.cancel()
        return first, again

    assert run(main()) == (3.0, None)


# ---------------------------------------------------------------- which signals count


def _ns(name: str, labels: dict | None = None, deleting: bool = False) -> dict:
    meta = {"name": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.fixture
def registry():
    saved = dict(NAMESPACES.infos), NAMESPACES.ready
    NAMESPACES.infos.clear()
    NAMESPACES.load([_ns("ds-known"), _ns("other")])
    reg = Registry(Config(scope_window_seconds=10.0))
    body = {"metadata": {"namespace": "slurm", "name": "b", "uid": "u1", "generation": 1},
            "spec": {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}},
                     "sandboxNamespaces": {"names": ["ds-*"], "selector": {"matchLabels": {"sbx": "yes"}}}}}
    state = reg.ensure(body)
    state.extras["discovery"] = SimpleNamespace(name="slurm-scheduler", namespace="slurm")
    yield reg, state
    NAMESPACES.infos.clear()
    NAMESPACES.infos.update(saved[0])
    NAMESPACES.ready = saved[1]


def _signals(state) -> tuple[bool, bool]:
    mem = state.extras.get("scope")
    if mem is None:
        return False, False
    return mem.syncer.pending, mem.syncer.urgent.is_set()


def test_namespace_events_schedule_only_matching_bindings(registry) -> None:
    reg, state = registry

    async def main():
        scope.memory(reg, state).known_list = ["ds-known"]
        scope.on_namespace(reg, "ADDED", _ns("unrelated"))
        none = _signals(state)
        scope.on_namespace(reg, "ADDED", _ns("ds-new"))
        glob = _signals(state)
        state.extras["scope"].syncer.cancel()
        scope.on_namespace(reg, "MODIFIED", _ns("ds-known", {"team": "x"}))  # still listed, still belongs
        noop = _signals(state)
        scope.on_namespace(reg, "MODIFIED", _ns("other", {"sbx": "yes"}))  # relabelled into the set
        relabel = _signals(state)
        state.extras["scope"].syncer.cancel()
        scope.on_namespace(reg, "MODIFIED", _ns("ds-known", deleting=True))  # terminating: leaves
        terminating = _signals(state)
        state.extras["scope"].syncer.cancel()
        return none, glob, noop, relabel, terminating

    none, glob, noop, relabel, terminating = run(main())
    assert none == (False, False)
    assert glob == (True, False)  # windowed, not urgent
    assert noop == (False, False)
    assert relabel == (True, False)
    assert terminating == (True, False)
    assert NAMESPACES.infos["ds-known"].terminating


def _pod(ns: str, scheduler: str = "slurm-scheduler", phase: str = "Pending", node: str | None = None) -> dict:
    spec = {"schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"namespace": ns, "name": "p"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize("pod, urgent", [
    (_pod("ds-fresh"), True),                       # matching, not listed, our scheduler: at once
    (_pod("ds-fresh", scheduler="default-scheduler"), False),
    (_pod("ds-fresh", phase="Running"), False),
    (_pod("ds-fresh", node="n1"), False),           # already bound to a node
    (_pod("elsewhere"), False),                     # not a sandbox namespace
])
def test_stuck_pod_signal(registry, pod, urgent) -> None:
    reg, state = registry

    async def main():
        scope.memory(reg, state).known_list = ["ds-known"]
        scope.on_sandbox_pod(reg, state, pod)
        got = _signals(state)
        state.extras["scope"].syncer.cancel()
        return got

    assert run(main()) == ((True, True) if urgent else (False, False))


def test_stuck_pod_in_a_listed_namespace_rechecks_at_most_every_few_seconds(registry) -> None:
    reg, state = registry

    async def main():
        mem = scope.memory(reg, state)
        mem.known_list = ["ds-known"]
        scope.on_sandbox_pod(reg, state, _pod("ds-known"))
        first = _signals(state)
        mem.syncer.cancel()
        scope.on_sandbox_pod(reg, state, _pod("ds-known"))
        second = _signals(state), mem.recheck_handle is not None
        mem.recheck_handle.cancel()
        return first, second

    first, second = run(main())
    assert first == (True, False)              # re-read, windowed
    assert second == ((False, False), True)    # deferred, not dropped


def test_pod_before_the_namespace_watch_counts_its_namespace(registry) -> None:
    reg, state = registry

    async def main():
        mem = scope.memory(reg, state)
        mem.known_list = []
        scope.on_sandbox_pod(reg, state, _pod("ds-unseen"))  # the namespace event has not arrived yet
        with_pod = scope._sandbox_set(state.spec, mem)
        scope.on_namespace(reg, "ADDED", _ns("ds-unseen", deleting=True))
        after_watch = scope._sandbox_set(state.spec, mem)
        mem.syncer.cancel()
        return with_pod, after_watch

    with_pod, after_watch = run(main())
    assert with_pod == {"ds-known", "ds-unseen"}
    assert after_watch == {"ds-known"}  # the watch decides once it knows the namespace


def test_binding_label_and_rolebinding_name_fit() -> None:
    long = SimpleNamespace(namespace="n" * 63, name="b" * 253)
    label = scope.binding_label(long)
    assert len(label) <= 63 and label[-1].isalnum()
    assert scope.binding_label(SimpleNamespace(namespace="slurm", name="b")) == "slurm.b"
    assert len(scope.rolebinding_name(long)) <= 253
    other = SimpleNamespace(namespace="n" * 63, name="b" * 252 + "c")
    assert scope.binding_label(other) != label and scope.rolebinding_name(other) != scope.rolebinding_name(long)


def _fake_target(monkeypatch, conf: str) -> list[dict]:
    """The scheduler ConfigMap held in memory; returns the list of writes."""
    from sunk_sandbox_operator import kube

    store = {"metadata": {"name": "cm", "namespace": "slurm", "resourceVersion": "1"}, "data": {"scheduler.conf": conf}}
    written: list[dict] = []

    async def get_configmap(namespace, name):
        return store

    async def replace_configmap_checked(namespace, name, body):
        written.append(body)
        store.update(body)
        return body

    async def empty(*args, **kwargs):
        return []

    monkeypatch.setattr(kube, "get_configmap", get_configmap)
    monkeypatch.setattr(kube, "replace_configmap_checked", replace_configmap_checked)
    monkeypatch.setattr(kube, "list_deployments", empty)
    monkeypatch.setattr(kube, "list_rolebindings", empty)
    return written


def test_known_list_is_a_set_after_a_sync(registry, monkeypatch) -> None:
    """Pod and namespace events look names up in it: a list would cost O(listed namespaces) per event."""
    reg, state = registry
    state.extras["discovery"] = SimpleNamespace(name="slurm-scheduler", namespace="slurm", configmap_name="cm",
                                                service_account="sa")
    written = _fake_target(monkeypatch, "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm]\n")
    reg.event_sink = lambda *a: None

    async def main():
        part = await scope.sync(reg, state, state.extras["discovery"])
        return part, scope.memory(reg, state).known_list

    part, known = run(main())
    assert part.reason == "Synced" and len(written) == 1
    assert isinstance(known, (set, frozenset)) and known == {"slurm", "ds-known"}


def test_cluster_scope_pod_signals_are_paced(registry, monkeypatch) -> None:
    """Scope type cluster: stuck pods cannot be a scope problem, so they only re-check, paced."""
    reg, state = registry
    state.extras["discovery"] = SimpleNamespace(name="slurm-scheduler", namespace="slurm", configmap_name="cm",
                                                service_account="sa")
    written = _fake_target(monkeypatch, "scheduler:\n  scope:\n    type: cluster\n")

    async def main():
        part = await scope.sync(reg, state, state.extras["discovery"])
        mem = scope.memory(reg, state)
        scope.on_sandbox_pod(reg, state, _pod("ds-fresh"))
        first = _signals(state)
        mem.syncer.cancel()
        scope.on_sandbox_pod(reg, state, _pod("ds-fresh"))
        second = _signals(state)
        if mem.recheck_handle is not None:
            mem.recheck_handle.cancel()
        return part, first, second

    part, first, second = run(main())
    assert part.reason == "ClusterScope" and written == []
    assert first == (True, False)    # a windowed re-read, not an urgent one per pod
    assert second == (False, False)  # and the next one deferred
