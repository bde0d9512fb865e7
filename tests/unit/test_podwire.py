"""Pod LIST pages decoded to the read fields (adapters/podwire.py) lose nothing the pipeline reads, and
the pod cache's hazard memo gives what judging each pod gives: both against the full decode, on realistic
and hostile pods."""

from __future__ import annotations

import orjson
from hypothesis import given, settings, strategies as st

from sunk_sandbox_operator.adapters.podwire import PodPageDecoder
from sunk_sandbox_operator.core.units import parse_quantity
from sunk_sandbox_operator.api import keys
from sunk_sandbox_operator.controller.caches import PodCache
from sunk_sandbox_operator.core.pods import container_hazards, decode_pod, resources_key

JSON = st.recursive(st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False)
                    | st.sampled_from(["", "1", "500m", "1Gi", "0", "x", "2"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=8)
QUANTITY = st.sampled_from(["1", "2", "500m", "1Gi", "2Gi", "0", "bad", 1, 1.0, True, None]) | JSON
RESOURCE_LIST = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]), QUANTITY, max_size=3)
RESOURCES = st.fixed_dictionaries({}, optional={"requests": RESOURCE_LIST | JSON, "limits": RESOURCE_LIST | JSON})
CONTAINER = st.fixed_dictionaries({"name": st.just("c"), "image": st.just("i")},
                                  optional={"resources": RESOURCES | JSON, "env": JSON})


def maybe(value):
    return value | JSON


POD = st.fixed_dictionaries({}, optional={
    "metadata": maybe(st.fixed_dictionaries({}, optional={
        "name": maybe(st.sampled_from(["p1", "p2"])), "namespace": maybe(st.sampled_from(["ds-a", "ds-b"])),
        "uid": maybe(st.just("u1")), "creationTimestamp": maybe(st.just("2026-12-01T00:00:00Z")),
        "labels": maybe(st.dictionaries(st.sampled_from([keys.SANDBOX_ID_LABEL, "x"]), JSON, max_size=2)),
        "annotations": maybe(st.dictionaries(st.sampled_from(["sunk.coreweave.com/partition", "sunk.coreweave.com/user-id",
                                                              "other"]), JSON, max_size=3)),
        "managedFields": JSON})),
    "spec": maybe(st.fixed_dictionaries({}, optional={
        "schedulerName": maybe(st.just("sunk")), "nodeName": maybe(st.just("n1")),
        "terminationGracePeriodSeconds": maybe(st.sampled_from([0, 30, 3600])),
        "containers": maybe(st.lists(CONTAINER | JSON, max_size=3)),
        "initContainers": maybe(st.lists(CONTAINER | JSON, max_size=2)), "volumes": JSON})),
    "status": maybe(st.fixed_dictionaries({}, optional={"phase": maybe(st.sampled_from(["Pending", "Running"])),
                                                        "conditions": JSON})),
})


def reads(pod: dict) -> tuple:
    """What controller.scope.on_sandbox_pod and the informer's key read of a pod body."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    return (spec.get("schedulerName"), spec.get("nodeName"), status.get("phase", "Pending"),
            meta.get("namespace"), meta.get("name"), meta.get("resourceVersion"))


def safe_reads(pod):
    try:
        return reads(pod)
    except AttributeError as exc:  # a hostile non-object field: the same failure both ways
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(st.lists(POD, max_size=4), st.one_of(st.none(), st.just("next-page")))
def test_a_slim_page_decodes_every_pod_as_the_full_page_does(pods, cont) -> None:
    raw = orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "42", **({"continue": cont} if cont else {})},
                        "items": pods})
    full, slim = orjson.loads(raw), PodPageDecoder()(raw)
    assert slim["metadata"] == full["metadata"]
    assert len(slim["items"]) == len(full["items"])
    for a, b in zip(full["items"], slim["items"]):
        if isinstance(a, dict) and isinstance(a.get("metadata"), dict):
            assert decode_pod(b, parse_quantity) == decode_pod(a, parse_quantity)
        assert safe_reads(b) == safe_reads(a)


def test_the_slim_page_keeps_only_the_read_fields_of_a_realistic_pod() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ds-a", "uid": "u", "resourceVersion": "7",
                        "labels": {keys.SANDBOX_ID_LABEL: "p"},
                        "managedFields": [{"manager": "runner", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
           "spec": {"schedulerName": "sunk", "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "b"}],
                                                            "resources": {"requests": {"cpu": "1"}},
                                                            "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                    "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
                    "tolerations": [{"key": "k", "operator": "Exists"}]},
           "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [{"type": "PodScheduled"}]}}
    slim = PodPageDecoder()(orjson.dumps({"items": [pod]}))["items"][0]
    assert slim == {"metadata": {"name": "p", "namespace": "ds-a", "uid": "u", "resourceVersion": "7",
                                 "labels": {keys.SANDBOX_ID_LABEL: "p"}},
                    "spec": {"schedulerName": "sunk", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
                    "status": {"phase": "Pending"}}


def test_a_page_that_does_not_fit_the_shape_is_decoded_in_full_and_bad_json_still_raises() -> None:
    decoder = PodPageDecoder()
    odd = {"items": [{"spec": {"containers": ["not an object"]}, "extra": 1}]}
    assert decoder(orjson.dumps(odd)) == odd
    assert decoder.fallbacks == 1
    try:
        decoder(b"{not json")
    except ValueError:
        pass
    else:
        raise AssertionError("malformed JSON must raise, as orjson.loads does")


@settings(max_examples=400, deadline=None)
@given(st.lists(CONTAINER | JSON, max_size=3), st.lists(CONTAINER | JSON, max_size=2))
def test_the_hazard_memo_gives_what_judging_the_pod_gives(containers, inits) -> None:
    cache = PodCache()
    body = {"metadata": {"namespace": "ds-a", "name": "p"}, "spec": {"containers": containers, "initContainers": inits}}
    first = cache.apply("ADDED", body)[0][1].resource_hazards
    again = cache.apply("MODIFIED", body)[0][1].resource_hazards   # from the memo when the key hashes
    direct = container_hazards(containers, inits, parse_quantity)
    assert first == again == direct


def test_the_memo_tells_a_boolean_from_a_number_and_init_containers_from_containers() -> None:
    def key(cpu, *, init=False):
        c = [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
        return resources_key([] if init else c, c if init else [])
    assert key(True) != key(1)
    assert key(1) != key(1, init=True)
    assert resources_key([{"resources": {"requests": {"cpu": ["unhashable"]}}}], []) is None
    cache = PodCache()
    hazards = []
    for cpu in (1, True):   # True is no quantity: judged as a missing request, not as the 1 before it
        pod = {"metadata": {"namespace": "ds-a", "name": f"p{cpu!r}"},
               "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}
        hazards.append(cache.apply("ADDED", pod)[0][1].resource_hazards)
    assert hazards[0] != hazards[1]


def test_the_memo_is_bounded() -> None:
    cache = PodCache()
    cache.HAZARDS_LIMIT = 10
    for i in range(25):
        cache.apply("ADDED", {"metadata": {"namespace": "ds-a", "name": f"p{i}"},
                              "spec": {"containers": [{"resources": {"requests": {"cpu": f"{i + 1}m"}}}]}})
        assert len(cache._hazards) <= 10
