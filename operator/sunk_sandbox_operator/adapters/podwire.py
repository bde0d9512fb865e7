"""Sandbox-pod LIST pages decoded to the fields the operator reads, and nothing else (msgspec).

A pod on the wire is 1.5-20 KB (managedFields, volumes, env, probes, container statuses); the
operator keeps a few hundred bytes of it (core/pods.py `PodRecord`). Decoding a whole page with
orjson built every one of those dicts only to drop them: msgspec, given the shape below, skips
what it is not asked for, so a page is decoded in less time into less memory (docs/scale.md;
`tests/unit/test_podwire.py` measures neither: it pins that nothing read is lost).

The result is the same plain JSON as orjson gives, restricted to these fields: an absent field
stays absent (UNSET), a null stays None, so `dict.get` reads it as before. Anything that does not
fit the shape (a container that is not an object: the API server never sends one) is decoded in
full with orjson instead, so a page never fails here that would have decoded before.

Every field the pod pipeline reads from a LIST item must be named here: `core.pods.decode_pod`,
`controller.scope.on_sandbox_pod` and the informer's key (namespace/name). Watch events are decoded
in full (one object at a time: nothing to gain in memory).
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from msgspec import UNSET, Struct, UnsetType, field


class _Meta(Struct):
    name: Any = UNSET
    namespace: Any = UNSET
    uid: Any = UNSET
    resourceVersion: Any = UNSET
    creationTimestamp: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET


class _Container(Struct):
    resources: Any = UNSET   # requests and limits: the hazards


class _Spec(Struct):
    schedulerName: Any = UNSET
    nodeName: Any = UNSET
    terminationGracePeriodSeconds: Any = UNSET
    containers: list[_Container] | None | UnsetType = UNSET
    initContainers: list[_Container] | None | UnsetType = UNSET


class _Status(Struct):
    phase: Any = UNSET


class _Pod(Struct):
    metadata: _Meta | None | UnsetType = UNSET
    spec: _Spec | None | UnsetType = UNSET
    status: _Status | None | UnsetType = UNSET


class _ListMeta(Struct):
    resourceVersion: Any = UNSET
    continue_: Any = field(default=UNSET, name="continue")


class _Page(Struct):
    metadata: _ListMeta | None | UnsetType = UNSET
    items: list[_Pod] | None | UnsetType = UNSET


class PodPageDecoder:
    """`decode(raw)`: one LIST page of pods (bytes of a PodList) as plain JSON of the read fields."""

    def __init__(self) -> None:
        self._decoder = msgspec.json.Decoder(_Page)
        self.fallbacks = 0   # pages that did not fit the shape (decoded in full)

    def __call__(self, raw: bytes) -> dict:
        try:
            page = self._decoder.decode(raw)
        except msgspec.DecodeError:  # a shape it does not fit, or not JSON: orjson decides (and raises)
            self.fallbacks += 1
            return orjson.loads(raw)
        return msgspec.to_builtins(page)  # wire names ("continue"); UNSET fields left out
