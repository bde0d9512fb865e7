"""adapters.kube without a server: each method sends the REST request the API server needs (paths,
merge patches, selectors, the status subresource, the field manager), responses are the raw JSON,
API statuses become typed errors (adapters.kubehttp); adapters.events posts core/v1 Events through it."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest

from sunk_sandbox_operator.adapters import events
from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import kubehttp
from sunk_sandbox_operator.adapters.kubeconfig import Access

from tests.unit.fakes import FakeKube, binding_body


class Recorder:
    """Stands in for KubeHTTP: records each request, answers from `answers` (by method and path)."""

    def __init__(self, answers: dict | None = None) -> None:
        self.calls: list[tuple] = []
        self.answers = answers or {}

    async def request(self, method, path, params=None, body=None, content_type="application/json"):
        self.calls.append((method, path, dict(params or {}), body, content_type))
        answer = self.answers.get((method, path), {"items": []})
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def http() -> Recorder:
    return Recorder()


@pytest.fixture
def kube(http) -> k.Kube:
    return k.Kube(http)


OURS = {"fieldManager": "sunk-sandbox-operator"}


@pytest.mark.parametrize("status, cls", [(404, k.NotFound), (409, k.Conflict), (403, k.Forbidden), (422, k.Invalid)])
def test_statuses_become_typed_errors(status, cls) -> None:
    err = kubehttp._error(status, json.dumps({"message": "the server said no"}).encode())
    assert isinstance(err, cls) and isinstance(err, k.KubeError) and str(err) == "the server said no"


def test_other_statuses_are_api_statuses_and_a_body_without_json_is_kept_short() -> None:
    err = kubehttp._error(500, b"<html>" + b"x" * 1000)
    assert isinstance(err, kubehttp.ApiStatus) and err.code == 500 and len(err.message) <= 200


async def test_a_dropped_connection_is_a_transient_api_status(monkeypatch) -> None:
    session = kubehttp.KubeHTTP(Access(server="http://127.0.0.1:9", authorization=lambda: None))  # nothing listens
    try:
        with pytest.raises(kubehttp.ApiStatus) as info:
            await session.request("GET", "/api/v1/namespaces", timeout=5)
        assert info.value.code == 503 and "ClientConnectorError" in info.value.message
        assert issubclass(kubehttp.ApiStatus, k.KubeError) and not issubclass(aiohttp.ClientError, k.KubeError)
    finally:
        await session.close()


async def test_reads_send_the_paths_and_selectors(kube, http) -> None:
    http.answers[("GET", "/api/v1/namespaces/slurm/pods")] = {"items": [{"metadata": {"name": "p"}}]}
    assert await kube.list_pods("slurm", "app=x") == [{"metadata": {"name": "p"}}]
    await kube.list_pods("slurm", None)
    await kube.list_rolebindings("sunksandbox.dev/binding=slurm.b")
    await kube.get_application("argocd", "app")
    await kube.get_helmrelease("flux", "hr")
    await kube.list_statefulsets("slurm")
    assert [(m, p, q) for m, p, q, _, _ in http.calls] == [
        ("GET", "/api/v1/namespaces/slurm/pods", {"labelSelector": "app=x", "limit": "500"}),  # paginated
        ("GET", "/api/v1/namespaces/slurm/pods", {"limit": "500"}),
        ("GET", "/apis/rbac.authorization.k8s.io/v1/rolebindings", {"labelSelector": "sunksandbox.dev/binding=slurm.b"}),
        ("GET", "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/app", {}),
        ("GET", "/apis/helm.toolkit.fluxcd.io/v2/namespaces/flux/helmreleases/hr", {}),
        ("GET", "/apis/apps/v1/namespaces/slurm/statefulsets", {"limit": "50"})]


@pytest.mark.parametrize(("kind", "path"), [
    ("ConfigMap", "/api/v1/namespaces/ns/configmaps"),
    ("Pod", "/api/v1/namespaces/ns/pods"),
    ("Application", "/apis/argoproj.io/v1alpha1/namespaces/ns/applications"),
    ("HelmRelease", "/apis/helm.toolkit.fluxcd.io/v2/namespaces/ns/helmreleases"),
])
def test_kind_path_gives_the_collection_and_an_object_in_it(kind: str, path: str) -> None:
    assert k.kind_path(kind, "ns") == path
    assert k.kind_path(kind, "ns", "x") == path + "/x"


def test_kind_path_knows_only_its_kinds() -> None:
    with pytest.raises(KeyError):
        k.kind_path("Secret", "ns")


async def test_the_doctors_reads_send_their_paths_and_page_through_long_lists(kube, http) -> None:
    pages = iter([{"items": [{"n": 1}], "metadata": {"continue": "c1"}}, {"items": [{"n": 2}], "metadata": {}}])

    async def paged(method, path, params=None, body=None, content_type="application/json"):
        http.calls.append((method, path, dict(params or {}), body, content_type))
        return next(pages) if path == "/api/v1/pods" else {}
    http.request = paged
    assert await kube.list_pods_everywhere("sandbox.coreweave.com/sandbox-id", "spec.nodeName=n1") == [{"n": 1}, {"n": 2}]
    await kube.get_binding("slurm", "b")
    await kube.get_node("n1")
    await kube.list_namespaces()
    assert [(m, p, q) for m, p, q, _, _ in http.calls] == [
        ("GET", "/api/v1/pods", {"labelSelector": "sandbox.coreweave.com/sandbox-id", "fieldSelector": "spec.nodeName=n1",
                                 "limit": "500"}),
        ("GET", "/api/v1/pods", {"labelSelector": "sandbox.coreweave.com/sandbox-id", "fieldSelector": "spec.nodeName=n1",
                                 "limit": "500", "continue": "c1"}),
        ("GET", "/apis/sunksandbox.dev/v1alpha1/namespaces/slurm/sunksandboxbindings/b", {}),
        ("GET", "/api/v1/nodes/n1", {}),
        ("GET", "/api/v1/namespaces", {"limit": "500"})]


async def test_a_paginated_list_keeps_only_what_each_maps_an_item_to(kube, http) -> None:
    http.answers[("GET", "/api/v1/pods")] = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    assert await kube.list_pods_everywhere(each=lambda p: p["metadata"]["name"]) == ["a", "b"]


async def test_merge_patches_say_so_and_name_the_field_manager(kube, http) -> None:
    await kube.merge_patch_deployment("slurm", "sched", {"spec": {}})
    await kube.merge_patch_application("argocd", "app", {"metadata": {"resourceVersion": "3"}})
    # managedFields then say which fields are ours.
    assert http.calls == [
        ("PATCH", "/apis/apps/v1/namespaces/slurm/deployments/sched", OURS, {"spec": {}}, k.MERGE_PATCH),
        ("PATCH", "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/app", OURS,
         {"metadata": {"resourceVersion": "3"}}, k.MERGE_PATCH)]


async def test_status_patches_go_to_the_status_subresource(kube, http) -> None:
    path = "/apis/sunksandbox.dev/v1alpha1/namespaces/slurm/sunksandboxbindings/b/status"
    http.answers[("PATCH", path)] = {"status": {"a": 1}}
    assert await kube.patch_binding_status("slurm", "b", {"a": 1}) == {"status": {"a": 1}}
    assert http.calls == [("PATCH", path, OURS, {"status": {"a": 1}}, k.MERGE_PATCH)]


async def test_the_scope_target_is_replaced_with_its_precondition(kube, http) -> None:
    body = {"metadata": {"name": "cm", "resourceVersion": "7"}, "data": {}}
    await kube.replace_configmap("slurm", "cm", body)
    assert http.calls == [("PUT", "/api/v1/namespaces/slurm/configmaps/cm", OURS, body, "application/json")]


async def test_read_secret_key_decodes_and_strips(kube, http) -> None:
    http.answers[("GET", "/api/v1/namespaces/slurm/secrets/s")] = {
        "data": {"token": base64.b64encode(b"s3cret\n").decode()}}
    assert await kube.read_secret_key("slurm", "s", "token") == "s3cret"
    with pytest.raises(KeyError):
        await kube.read_secret_key("slurm", "s", "other")
    assert await kube.secret_has_key("slurm", "s", "token") and not await kube.secret_has_key("slurm", "s", "x")


async def test_delete_of_a_rolebinding_already_gone_is_fine(kube, http) -> None:
    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/ds-a/rolebindings/rb"
    http.answers[("DELETE", path)] = k.NotFound("not found")
    assert await kube.delete_rolebinding("ds-a", "rb") is None
    http.answers[("DELETE", path)] = k.Forbidden("no")
    with pytest.raises(k.Forbidden):
        await kube.delete_rolebinding("ds-a", "rb")


async def test_a_subject_access_review_asks_for_the_service_account(kube, http) -> None:
    http.answers[("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")] = {"status": {"allowed": True}}
    assert await kube.service_account_may("slurm", "sched", "create", "pods", "ds-a", "binding")
    (_, _, _, body, _), = http.calls
    assert body["spec"]["user"] == "system:serviceaccount:slurm:sched"
    assert body["spec"]["resourceAttributes"] == {"verb": "create", "resource": "pods", "namespace": "ds-a",
                                                  "subresource": "binding"}


# ---------------------------------------------------------------- events, posted by the operator itself


async def test_events_are_core_v1_events_about_the_binding() -> None:
    kube = FakeKube()
    sink = events.KubeEventSink(kube, now_iso=lambda: "2026-01-01T00:00:00Z")
    body = binding_body()
    sink(body, "Warning", "Forbidden", "x" * 5000)
    await sink.drain()
    [event] = kube.store["events"].values()
    assert event["involvedObject"] == {"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
                                       "name": "b", "namespace": "slurm", "uid": "u1"}
    assert (event["type"], event["reason"], len(event["message"])) == ("Warning", "Forbidden", events.MAX_MESSAGE)
    assert event["metadata"]["namespace"] == "slurm" and event["reportingComponent"] == events.COMPONENT
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-01T00:00:00Z" and event["count"] == 1


async def test_an_event_that_cannot_be_posted_is_dropped_quietly() -> None:
    kube = FakeKube()
    kube.deny("create_event")
    sink = events.KubeEventSink(kube)
    sink(binding_body(), "Normal", "ScopeUpdated", "m")
    await sink.drain()
    assert kube.count("create_event") == 1 and kube.store["events"] == {}
    events.safe(lambda *a: 1 / 0)(binding_body(), "Normal", "R", "m")   # a broken sink never raises either


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_roll_right_after_the_scope_write_amends_its_event() -> None:
    """The first reconcile of a healthy binding posted ScopeUpdated, then SchedulerRestarted for the roll
    onto that list: one event says both (issue 34: at most two events for a healthy first reconcile)."""
    kube, clock = FakeKube(), Clock()
    sink = events.KubeEventSink(kube, now_iso=lambda: f"2026-01-01T00:00:{int(clock.now) % 60:02d}Z", monotonic=clock)
    body = binding_body()
    sink(body, "Normal", "ScopeUpdated", "ConfigMap slurm/c: added ds-a")
    clock.now += 1
    sink(body, "Normal", "SchedulerRestarted", "Deployment slurm/s: pod-template ...")  # before the create returned
    await sink.drain()
    [event] = kube.store["events"].values()
    assert event["reason"] == "ScopeUpdated" and event["count"] == 1
    assert event["message"] == "ConfigMap slurm/c: added ds-a; SchedulerRestarted: Deployment slurm/s: pod-template ..."
    assert event["lastTimestamp"] == "2026-01-01T00:00:41Z" != event["firstTimestamp"]
    assert kube.count("merge_patch_event") == 1

    # Once: a second roll is an event of its own; so is one long after a scope write, or on another binding.
    sink(body, "Normal", "SchedulerRestarted", "again")
    sink(body, "Normal", "ScopeUpdated", "added ds-b")
    clock.now += events.FOLD_SECONDS + 1
    sink(body, "Normal", "SchedulerRestarted", "late")
    other = binding_body(name="other", uid="u2")
    sink(other, "Normal", "ScopeUpdated", "added ds-c")
    sink(body, "Normal", "SchedulerRestarted", "not the other's")
    await sink.drain()
    assert sorted((e["reason"], e["message"]) for e in kube.store["events"].values()) == sorted([
        ("ScopeUpdated", event["message"]), ("SchedulerRestarted", "again"), ("ScopeUpdated", "added ds-b"),
        ("SchedulerRestarted", "late"), ("ScopeUpdated", "added ds-c"), ("SchedulerRestarted", "not the other's")])


async def test_a_roll_whose_scope_event_was_not_posted_or_cannot_be_amended_is_posted_on_its_own() -> None:
    kube = FakeKube()
    sink = events.KubeEventSink(kube)
    kube.deny("create_event")
    sink(binding_body(), "Normal", "ScopeUpdated", "added ds-a")
    await sink.drain()
    kube.allow("create_event")
    sink(binding_body(), "Normal", "SchedulerRestarted", "rolled")
    await sink.drain()
    assert [e["reason"] for e in kube.store["events"].values()] == ["SchedulerRestarted"]
    kube.deny("merge_patch_event")
    sink(binding_body(), "Normal", "ScopeUpdated", "added ds-b")
    sink(binding_body(), "Normal", "SchedulerRestarted", "rolled again")
    await sink.drain()
    assert sorted(e["message"] for e in kube.store["events"].values()) == ["added ds-b", "rolled", "rolled again"]


def test_the_fake_kube_of_the_unit_tests_has_the_real_ones_methods() -> None:
    """tests/unit/fakes.FakeKube stands in for Kube everywhere: it must not drift from it."""
    import inspect

    def methods(cls) -> dict[str, list[str]]:
        return {n: list(inspect.signature(f).parameters) for n, f in inspect.getmembers(cls, inspect.iscoroutinefunction)
                if not n.startswith("_")}

    assert methods(FakeKube) == methods(k.Kube)


WRITES = {"patch_binding_status": ("ns", "b", {}), "replace_configmap": ("ns", "cm", {}),
          "create_configmap": ("ns", {"metadata": {"name": "cm"}}), "delete_configmap": ("ns", "cm"),
          "merge_patch_deployment": ("ns", "d", {}), "merge_patch_application": ("ns", "a", {}),
          "merge_patch_statefulset": ("ns", "s", {}),
          "create_event": ("ns", {}), "create_rolebinding": ("ns", {}), "delete_rolebinding": ("ns", "rb")}


@pytest.mark.parametrize("method", sorted(WRITES))
async def test_every_write_is_refused_while_not_leading_and_nothing_is_sent(kube, http, method) -> None:
    kube.writable = lambda: False
    with pytest.raises(k.NotLeader):
        await getattr(kube, method)(*WRITES[method])
    assert http.calls == []


async def test_reads_and_the_lease_are_not_gated(kube, http) -> None:
    kube.writable = lambda: False
    assert await kube.list_configmaps("ns") == []
    assert await kube.get_lease("ns", "l") == {"items": []}  # the elector needs the Lease while standing by
    await kube.replace_lease("ns", "l", {"metadata": {"resourceVersion": "1"}})
    assert [c[:2] for c in http.calls] == [
        ("GET", "/api/v1/namespaces/ns/configmaps"),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l")]


async def test_gather_bounded_keeps_order_returns_errors_and_holds_only_limit_calls() -> None:
    import asyncio

    from sunk_sandbox_operator.adapters.bounded import gather_bounded

    alive, most, made = 0, 0, 0

    async def call(i: int) -> int:
        nonlocal alive, most
        assert made <= i + 4  # made only as a worker frees up: never all 40 up front
        alive += 1
        most = max(most, alive)
        await asyncio.sleep(0.001 * (i % 3))
        alive -= 1
        if i == 5:
            raise ValueError("five")
        return i

    def calls():
        nonlocal made
        for i in range(40):
            made += 1
            yield call(i)

    out = await gather_bounded(calls(), 4)
    assert [x if not isinstance(x, ValueError) else "err" for x in out] == [*range(5), "err", *range(6, 40)]
    assert most == 4 and made == 40
    assert await gather_bounded(iter(()), 4) == []


async def test_rolebinding_creates_drop_each_answer_at_once() -> None:
    """5,000 created RoleBindings held until the last create were 20 MiB of the start's peak: each
    answer is let go as soon as it is in, and only the errors come back."""
    import gc
    import weakref

    from sunk_sandbox_operator.adapters import grants as io
    from sunk_sandbox_operator.adapters import kube as k

    class Answer(dict):
        pass

    alive: list[weakref.ref] = []
    most = 0

    class Creator:
        async def create_rolebinding(self, namespace: str, body: dict) -> dict:
            nonlocal most
            gc.collect()
            most = max(most, sum(1 for r in alive if r() is not None))
            if namespace == "taken":
                raise k.Conflict("exists")
            answer = Answer(body)
            alive.append(weakref.ref(answer))
            return answer

    bodies = [{"metadata": {"namespace": ns, "name": "rb"}} for ns in ["a", "taken", *map(str, range(60))]]
    out = await io.create(Creator(), bodies)  # type: ignore[arg-type]
    assert out[0] is None and isinstance(out[1], k.Conflict) and out[2:] == [None] * 60
    assert most <= io.CONCURRENCY  # never more answers alive than calls in flight


def test_the_bearer_token_is_asked_for_at_most_every_few_seconds() -> None:
    """A token file read (or the kubernetes client's hook, which reloads a kubeconfig's settings) at
    each request would cost: one value serves AUTH_REUSE_SECONDS, then it is asked again (a
    rotated token is picked up)."""
    tokens = iter(["Bearer one", "Bearer two"])
    calls = []

    def authorization() -> str:
        calls.append(1)
        return next(tokens)

    now = [100.0]
    session = kubehttp.KubeHTTP(Access(server="https://127.0.0.1:6443", authorization=authorization,
                                       insecure=True), monotonic=lambda: now[0])
    assert session._headers(None)["Authorization"] == "Bearer one"
    now[0] += kubehttp.AUTH_REUSE_SECONDS - 0.1
    assert session._headers({"Accept": "x"}) == {"Accept": "x", "User-Agent": "sunk-sandbox-operator",
                                                 "Authorization": "Bearer one"} and len(calls) == 1
    now[0] += 0.1
    assert session._headers(None)["Authorization"] == "Bearer two" and len(calls) == 2
    no_token = Access(server="https://127.0.0.1:6443", authorization=lambda: None, insecure=True)
    assert "Authorization" not in kubehttp.KubeHTTP(no_token)._headers(None)  # no token: none sent
