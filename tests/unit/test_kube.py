"""adapters.kube without a server: API statuses become typed errors, responses are raw JSON, and each method
calls the generated client the way the API server needs (merge patches, selectors, the status subresource);
adapters.events posts core/v1 Events through it."""

from __future__ import annotations

import base64
import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from sunk_sandbox_operator.adapters import events
from sunk_sandbox_operator.adapters import kube as k

from tests.unit.fakes import FakeKube, binding_body


class Response:
    def __init__(self, obj: object) -> None:
        self.data = json.dumps(obj).encode()


def failing(status: int, body: str | None, reason: str = "r"):
    def fn(*_args, **_kwargs):
        exc = ApiException(status=status, reason=reason)
        exc.body = body
        raise exc
    return fn


@pytest.fixture
def kube() -> k.Kube:
    return k.Kube(kubernetes.client.ApiClient())  # nothing is sent: every API object is replaced below


@pytest.mark.parametrize("status, cls", [(404, k.NotFound), (409, k.Conflict), (403, k.Forbidden), (422, k.Invalid)])
async def test_every_call_translates_the_same_statuses(kube, status, cls) -> None:
    with pytest.raises(cls) as info:
        await kube._call(failing(status, json.dumps({"message": "the server said no"})))
    assert str(info.value) == "the server said no" and isinstance(info.value, k.KubeError)


async def test_a_status_without_a_json_message_keeps_the_reason(kube) -> None:
    with pytest.raises(k.Conflict, match="^Conflict$"):
        await kube._call(failing(409, "<html>proxy</html>", reason="Conflict"))
    with pytest.raises(k.NotFound, match="^Not Found$"):
        await kube._call(failing(404, json.dumps({"kind": "Status"}), reason="Not Found"))


async def test_other_statuses_stay_api_exceptions(kube) -> None:
    with pytest.raises(ApiException) as info:
        await kube._call(failing(500, None, reason="boom"))
    assert info.value.status == 500 and not isinstance(info.value, k.KubeError)


async def test_responses_are_the_raw_json_the_server_sent(kube) -> None:
    seen = {}

    def fn(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return Response({"metadata": {"resourceVersion": "7"}, "data": {"scheduler.conf": "x"}})

    got = await kube._call(fn, "cm", "slurm", extra=1)
    assert got == {"metadata": {"resourceVersion": "7"}, "data": {"scheduler.conf": "x"}}  # camelCase, as sent
    assert seen == {"args": ("cm", "slurm"), "kwargs": {"_preload_content": False, "extra": 1}}


class FakeApi:
    """Stands in for one generated API object (CoreV1Api, ...): records calls, answers from `answers`."""

    def __init__(self, answers: dict | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.answers = answers or {}

    def __getattr__(self, name: str):
        def method(*args, **kwargs):
            self.calls.append((name, args, {k: v for k, v in kwargs.items() if k != "_preload_content"}))
            answer = self.answers.get(name, {"items": []})
            if isinstance(answer, Exception):
                raise answer
            return Response(answer)
        return method


def _api(kube: k.Kube, **answers) -> FakeApi:
    api = FakeApi(answers)
    kube.core = kube.apps = kube.rbac = kube.custom = api
    return api


async def test_list_pods_sends_a_selector_only_when_there_is_one(kube) -> None:
    api = _api(kube, list_namespaced_pod={"items": [{"metadata": {"name": "p"}}]})
    assert await kube.list_pods("slurm", "app=x") == [{"metadata": {"name": "p"}}]
    await kube.list_pods("slurm", None)
    assert api.calls == [("list_namespaced_pod", ("slurm",), {"label_selector": "app=x"}),
                         ("list_namespaced_pod", ("slurm",), {})]


async def test_merge_patches_say_so(kube) -> None:
    api = _api(kube)
    await kube.merge_patch_deployment("slurm", "sched", {"spec": {}})
    await kube.merge_patch_application("argocd", "app", {"metadata": {"resourceVersion": "3"}})
    # ... and name the operator's field manager (managedFields say which fields are ours).
    assert [c[2] for c in api.calls] == [{"field_manager": "sunk-sandbox-operator", "_content_type": k.MERGE_PATCH}] * 2
    assert api.calls[0][:2] == ("patch_namespaced_deployment", ("sched", "slurm", {"spec": {}}))
    assert api.calls[1][1] == (k.ARGO_GROUP, k.ARGO_VERSION, "argocd", k.ARGO_PLURAL, "app",
                               {"metadata": {"resourceVersion": "3"}})


async def test_status_patches_go_to_the_status_subresource(kube) -> None:
    api = _api(kube, patch_namespaced_custom_object_status={"status": {"a": 1}})
    assert await kube.patch_binding_status("slurm", "b", {"a": 1}) == {"status": {"a": 1}}
    name, args, _ = api.calls[0]
    assert name == "patch_namespaced_custom_object_status"
    assert args == ("sunksandbox.dev", "v1alpha1", "slurm", "sunksandboxbindings", "b", {"status": {"a": 1}})


async def test_read_secret_key_decodes_and_strips(kube) -> None:
    _api(kube, read_namespaced_secret={"data": {"token": base64.b64encode(b"s3cret\n").decode()}})
    assert await kube.read_secret_key("slurm", "s", "token") == "s3cret"
    with pytest.raises(KeyError):
        await kube.read_secret_key("slurm", "s", "other")


async def test_delete_of_a_rolebinding_already_gone_is_fine(kube) -> None:
    gone = ApiException(status=404, reason="Not Found")
    gone.body = json.dumps({"message": "not found"})
    _api(kube, delete_namespaced_role_binding=gone)
    assert await kube.delete_rolebinding("ds-a", "rb") is None
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = None
    _api(kube, delete_namespaced_role_binding=denied)
    with pytest.raises(k.Forbidden):
        await kube.delete_rolebinding("ds-a", "rb")


async def test_list_rolebindings_is_cluster_wide_by_label(kube) -> None:
    api = _api(kube)
    await kube.list_rolebindings("sunksandbox.dev/binding=slurm.b")
    assert api.calls == [("list_role_binding_for_all_namespaces", (),
                          {"label_selector": "sunksandbox.dev/binding=slurm.b"})]


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
          "create_event": ("ns", {}), "create_rolebinding": ("ns", {}), "delete_rolebinding": ("ns", "rb")}


@pytest.mark.parametrize("method", sorted(WRITES))
async def test_every_write_is_refused_while_not_leading_and_nothing_is_sent(kube, method) -> None:
    sent = []
    kube._call = lambda *a, **kw: sent.append(a)  # would record a request; must never be reached
    kube.writable = lambda: False
    with pytest.raises(k.NotLeader):
        await getattr(kube, method)(*WRITES[method])
    assert sent == []


async def test_reads_and_the_lease_are_not_gated(kube) -> None:
    kube.writable = lambda: False

    async def answer(*_a, **_kw):
        return {"items": []}
    kube._call = answer
    assert await kube.list_configmaps("ns") == []
    assert await kube.get_lease("ns", "l") == {"items": []}  # the elector needs the Lease while standing by
