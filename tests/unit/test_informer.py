"""The informer's LIST + WATCH over a scripted fake HTTP: pagination, watch events and bookmarks, relist on
410 Gone reporting what vanished, and backoff on errors (sleep injected)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters.informer import PARTIAL_LIST, PARTIAL_ONE, Informer, Resource
from sunk_sandbox_operator.adapters.kubehttp import ApiStatus, status_code
from sunk_sandbox_operator.core.backoff import Backoff

from tests.unit.fakes import settle


def pod(name: str, rv: str = "1", ns: str = "ds-a") -> dict:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": rv}}


class FakeHTTP:
    """Scripted answers: `pages` for GETs (an exception is raised), `watches` for WATCH streams; once the
    script is used up, a watch waits for ever (as a quiet server does)."""

    def __init__(self, pages: list, watches: list) -> None:
        self.pages, self.watches = list(pages), list(watches)
        self.gets: list[tuple[str, dict, dict | None]] = []
        self.watched: list[tuple[str, dict, dict | None]] = []
        self.idle = asyncio.Event()

    async def get(self, path, params, headers=None, timeout=60.0, decode=None):
        self.gets.append((path, dict(params), headers))
        answer = self.pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return decode(orjson.dumps(answer)) if decode else answer

    async def watch(self, path, params, headers=None, timeout=330.0):
        self.watched.append((path, dict(params), headers))
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


class Sink:
    """A cache keyed like the informer (namespace/name), recording events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: dict[str, dict] = {}

    def __call__(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        self.events.append((kind, key))
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj

    def keys(self):
        return self.objects.keys()


async def run(informer: Informer, http: FakeHTTP) -> None:
    """Run the informer until its script is used up (the watch goes quiet), then stop it."""
    task = asyncio.ensure_future(informer.run())
    try:
        await asyncio.wait_for(http.idle.wait(), timeout=5)
        await settle()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def make(http: FakeHTTP, sink: Sink, **kw) -> tuple[Informer, list[float]]:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    kw.setdefault("rand", lambda: 0.0)  # the backoff's ceilings (no jitter drawn)
    informer = Informer(http, Resource("/api/v1/pods", label_selector="sandbox-id"), sink, sink.keys, page_size=2,
                        sleep=sleep, **kw)
    return informer, slept


async def test_a_paginated_list_then_watch_events_and_bookmarks() -> None:
    http = FakeHTTP(
        pages=[{"items": [pod("a"), pod("b")], "metadata": {"continue": "c1"}},
               {"items": [pod("c")], "metadata": {"resourceVersion": "10"}}],
        watches=[[{"type": "MODIFIED", "object": pod("a", "11")},
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                  {"type": "DELETED", "object": pod("b", "16")}]])
    sink = Sink()
    informer, slept = make(http, sink)
    await run(informer, http)
    assert [p for _, p, _ in http.gets] == [{"labelSelector": "sandbox-id", "limit": "2"},
                                           {"labelSelector": "sandbox-id", "limit": "2", "continue": "c1"}]
    assert sink.events == [("ADDED", "ds-a/a"), ("ADDED", "ds-a/b"), ("ADDED", "ds-a/c"),
                           ("MODIFIED", "ds-a/a"), ("DELETED", "ds-a/b")]    # no bookmark reaches the sink
    first_watch = http.watched[0][1]
    assert first_watch["resourceVersion"] == "10" and first_watch["allowWatchBookmarks"] == "true"
    assert first_watch["labelSelector"] == "sandbox-id"
    assert http.watched[1][1]["resourceVersion"] == "16"                   # the stream ended: resume from here
    assert informer.ready.is_set() and informer.lists == 1 and informer.events == 2 and slept == []


async def test_the_next_page_is_asked_for_before_this_one_reaches_the_sink() -> None:
    http = FakeHTTP(pages=[{"items": [pod("a")], "metadata": {"continue": "c1"}},
                           {"items": [pod("b")], "metadata": {"continue": "c2"}},
                           {"items": [pod("c")], "metadata": {"resourceVersion": "10"}}], watches=[])
    asked_when: list[int] = []
    sink = Sink()

    def recording(kind: str, obj: dict) -> None:
        asked_when.append(len(http.gets))
        sink(kind, obj)

    informer = Informer(http, Resource("/api/v1/pods"), recording, sink.keys, page_size=1)
    await run(informer, http)
    assert asked_when == [2, 3, 3] and sorted(sink.objects) == ["ds-a/a", "ds-a/b", "ds-a/c"]


async def test_a_failed_page_ends_the_list_and_the_relist_starts_over() -> None:
    http = FakeHTTP(pages=[{"items": [pod("a")], "metadata": {"continue": "c1"}}, ApiStatus(500, "etcd"),
                           {"items": [pod("a"), pod("b")], "metadata": {"resourceVersion": "10"}}], watches=[])
    sink = Sink()
    informer, slept = make(http, sink)
    await run(informer, http)
    assert [p.get("continue") for _, p, _ in http.gets] == [None, "c1", None] and slept == [1.0]
    assert sorted(sink.objects) == ["ds-a/a", "ds-a/b"] and informer.lists == 1


async def test_a_410_relists_and_reports_what_vanished_meanwhile_as_deleted() -> None:
    http = FakeHTTP(
        pages=[{"items": [pod("a"), pod("b")], "metadata": {"resourceVersion": "5"}},
               {"items": [pod("a", "20")], "metadata": {"resourceVersion": "20"}}],
        watches=[[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}]])
    sink = Sink()
    informer, slept = make(http, sink)
    await run(informer, http)
    assert informer.lists == 2 and slept == []                             # no backoff for a 410
    assert sink.events[-2:] == [("ADDED", "ds-a/a"), ("DELETED", "ds-a/b")]
    assert http.watched[-1][1]["resourceVersion"] == "20"


async def test_errors_back_off_and_never_give_up(caplog) -> None:
    http = FakeHTTP(pages=[ApiStatus(500, "etcd"), k.Forbidden("no list"), {"items": [], "metadata": {"resourceVersion": "1"}}],
                    watches=[OSError("connection reset")])
    sink = Sink()
    informer, slept = make(http, sink, backoff=Backoff(base=1.0, cap=3.0, jitter=0.5), rand=lambda: 0.5)
    await run(informer, http)
    assert slept == [0.75, 1.5, 2.25]                        # consecutive failures grow the delay, to the cap
    assert informer.lists == 1 and informer.ready.is_set()
    assert "etcd" in caplog.text and "no list" in caplog.text and "OSError" in caplog.text  # a library error: its type (core/redact.py)
    assert informer.failed.is_set()        # the last attempt (the watch) failed: nobody should wait on it


async def test_a_refused_list_says_so_until_one_succeeds() -> None:
    """`failed`: a first reconcile waiting for this watch's LIST stops waiting (and reads, and says why)."""
    http = FakeHTTP(pages=[k.Forbidden("no list"), {"items": [], "metadata": {"resourceVersion": "1"}}], watches=[])
    seen: list[bool] = []

    async def sleep(delay: float) -> None:
        seen.append(informer.failed.is_set())

    informer = Informer(http, Resource("/api/v1/pods"), Sink(), lambda: [], sleep=sleep)
    await run(informer, http)
    assert seen == [True] and informer.ready.is_set() and not informer.failed.is_set()


async def test_metadata_only_resources_ask_for_partial_objects() -> None:
    http = FakeHTTP(pages=[{"items": [{"metadata": {"name": "ds-a"}}], "metadata": {"resourceVersion": "3"}}],
                    watches=[])
    sink = Sink()
    informer = Informer(http, Resource("/api/v1/namespaces", metadata_only=True), sink, sink.keys)
    await run(informer, http)
    assert http.gets[0][2] == {"Accept": PARTIAL_LIST} and http.watched[0][2] == {"Accept": PARTIAL_ONE}
    assert "labelSelector" not in http.gets[0][1] and sink.events == [("ADDED", "ds-a")]


@pytest.mark.parametrize("event, code", [({"object": {"code": 410}}, 410), ({"object": "x"}, None), ("junk", None)])
def test_status_code_of_a_watch_error(event, code) -> None:
    assert status_code(event) == code


def test_resource_keys() -> None:
    assert Resource("/api/v1/pods").key(pod("a")) == "ds-a/a"
    assert Resource("/api/v1/namespaces").key({"metadata": {"name": "ds-a"}}) == "ds-a"


async def test_pages_grow_or_shrink_to_their_byte_target() -> None:
    """A tenant's objects listed in full: the first page asks for few, the next ones for as many as fit
    the target by the size of what came (hundreds of small ConfigMaps a page, a few of 1 MiB)."""
    small = [{"metadata": {"namespace": "t", "name": f"s{i}"}, "data": {"n": "1"}} for i in range(2000)]
    big = [{"metadata": {"namespace": "t", "name": f"b{i}"}, "data": {"x": "y" * 100_000}} for i in range(30)]
    pages: list[dict] = []
    for i, chunk in enumerate([small[:8], small[8:1008], small[1008:], big[:10], big[10:30]]):
        pages.append({"items": chunk, "metadata": {"continue": f"c{i}"} if i < 4 else {"resourceVersion": "9"}})
    http = FakeHTTP(pages=pages, watches=[])
    informer = Informer(http, Resource("/api/v1/namespaces/t/configmaps", page_bytes=1_000_000, max_page_size=1000),
                        Sink(), lambda: [], page_size=8)
    await run(informer, http)
    limits = [int(params["limit"]) for _, params, _ in http.gets]
    assert limits[0] == 8 and limits[1] == 1000 and limits[2] == 1000   # small items: up to max_page_size
    assert limits[4] == 9                                               # 100 kB items: nine fit 1 MB
