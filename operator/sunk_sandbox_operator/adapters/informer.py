"""Informer-grade LIST + WATCH of one resource kind, feeding a sink one event at a time.

client-go's reflector is the model: a paginated LIST (limit/continue) gives the items and a
resourceVersion; a WATCH from it (with bookmarks, so the version stays fresh while nothing
changes) gives the changes; when the server says 410 Gone (the version was compacted away) the
informer lists again and reports what disappeared meanwhile as DELETED. No per-object worker,
memory, annotation or log line: the sink (a cache) decides what to keep of each object.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

import orjson

from ..core.backoff import Backoff
from . import kube as k
from .kubehttp import ApiStatus, KubeHTTP, status_code

log = logging.getLogger("sunk_sandbox_operator")

# Namespaces: metadata is all the operator reads (name, labels, deletionTimestamp).
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PARTIAL_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

Sink = Callable[[str, dict], None]
YIELD_EVERY = 100  # LIST items handed to the sink between two turns of the event loop
# After failures in a row: soon after a blip, at most every 30 s while the API server is away, and
# jittered, so the informers of every replica do not relist together when it comes back.
RETRY_BACKOFF = Backoff(base=1.0, cap=30.0, jitter=0.5)


@dataclass(frozen=True)
class Resource:
    path: str                          # e.g. /api/v1/namespaces, /api/v1/pods (cluster-wide)
    label_selector: str | None = None  # filtered server-side
    metadata_only: bool = False        # PartialObjectMetadata: no spec/status on the wire
    page_decoder: Callable[[bytes], dict] | None = None  # LIST pages' bytes to JSON (None: orjson, in full)
    # Bytes a LIST page should hold (None: no target, `page_size` items a page). With one, pages start at
    # `page_size` items and grow or shrink to it by the size of the items seen so far (a tenant's
    # ConfigMaps: eight of 1 MiB, or hundreds of a few bytes, a page).
    page_bytes: int | None = None
    max_page_size: int = 500

    def key(self, obj: dict) -> str:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace")
        return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer:
    def __init__(self, http: KubeHTTP, resource: Resource, sink: Sink, known: Callable[[], Iterable[str]], *,
                 page_size: int = 500, watch_timeout: int = 300, name: str = "informer",
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 backoff: Backoff = RETRY_BACKOFF, rand: Callable[[], float] = random.random) -> None:
        self.http, self.resource, self.sink, self.known = http, resource, sink, known
        self.page_size, self.watch_timeout, self.name = page_size, watch_timeout, name
        self._sleep, self.backoff, self._rand = sleep, backoff, rand
        self.ready = asyncio.Event()      # set once the first complete LIST is in the sink
        self.failed = asyncio.Event()     # set while its last attempt failed (refused, unreachable): don't wait
        self.resource_version: str | None = None
        self.lists = 0                    # LISTs done (1 + relists after 410)
        self.events = 0                   # watch events handed to the sink

    def _params(self) -> dict[str, str]:
        return {"labelSelector": self.resource.label_selector} if self.resource.label_selector else {}

    async def list(self) -> None:
        """One consistent paginated LIST into the sink; what the sink knew and the LIST lacks is DELETED.

        The next page is asked for before this one goes into the sink, and the sink yields to the
        event loop every YIELD_EVERY items: the API server prepares page k+1 (on its own core) while
        the operator decodes page k, and nothing else in the operator waits for a 50,000-pod LIST."""
        headers = {"Accept": PARTIAL_LIST} if self.resource.metadata_only else None
        seen: set[str] = set()
        before = set(self.known())
        limit, sizes = self.page_size, [0]  # sizes[-1]: the bytes of the last page (with page_bytes)
        target, decoder = self.resource.page_bytes, self.resource.page_decoder

        def decode(raw: bytes) -> dict:
            sizes.append(len(raw))
            return decoder(raw) if decoder is not None else orjson.loads(raw)

        def fetch(cont: str | None) -> asyncio.Future:
            params = {**self._params(), "limit": str(limit), **({"continue": cont} if cont else {})}
            return asyncio.ensure_future(self.http.get(self.resource.path, params, headers,
                                                       decode=decode if target else decoder))

        pending: asyncio.Future | None = fetch(None)
        try:
            while True:
                assert pending is not None  # the loop ends when no page is left to fetch
                page = await pending
                meta = page.get("metadata") or {}
                cont = meta.get("continue")
                if target and page.get("items"):
                    per_item = max(1, sizes[-1] // len(page["items"]))
                    limit = max(self.page_size, min(self.resource.max_page_size, target // per_item))
                pending = fetch(cont) if cont else None
                await asyncio.sleep(0)  # let the next page's request go out before this page is decoded
                for i, item in enumerate(page.get("items") or [], 1):
                    seen.add(self.resource.key(item))
                    self.sink("ADDED", item)
                    if i % YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                if pending is None:
                    self.resource_version = meta.get("resourceVersion")
                    break
        finally:  # a failed page ends the LIST (run() relists): the prefetch is not left behind
            if pending is not None and not pending.done():
                pending.cancel()
            elif pending is not None and not pending.cancelled():
                pending.exception()
        for key in before - seen:
            ns, _, name = key.rpartition("/")
            self.sink("DELETED", {"metadata": {"namespace": ns, "name": name} if ns else {"name": name}})
        self.lists += 1
        self.failed.clear()
        self.ready.set()

    async def _watch(self) -> None:
        headers = {"Accept": PARTIAL_ONE} if self.resource.metadata_only else None
        params = {**self._params(), "resourceVersion": self.resource_version or "", "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self.watch_timeout)}
        async for event in self.http.watch(self.resource.path, params, headers, timeout=self.watch_timeout + 30):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise ApiStatus(status_code(event) or 500, str(obj.get("message", "")))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.events += 1
                self.sink(kind, obj)

    def _retry_delay(self, failures: int) -> float:
        """The one backoff (core/backoff.py) after `failures` (1, 2, ...) failures in a row."""
        return self.backoff.delay(failures - 1, self._rand)

    async def run(self) -> None:
        """List, then watch for ever; relist on 410 Gone; back off on errors (never give up)."""
        failures = 0
        need_list = True
        while True:
            try:
                if need_list:
                    await self.list()
                    need_list = False
                await self._watch()
                failures = 0
            except asyncio.CancelledError:
                raise
            except ApiStatus as exc:
                need_list = need_list or exc.code == 410
                if exc.code != 410:
                    failures += 1
                    self.failed.set()
                    log.warning("%s: %s; retrying", self.name, exc)
                    await self._sleep(self._retry_delay(failures))
            except (k.Forbidden, OSError, asyncio.TimeoutError, ValueError, Exception) as exc:  # noqa: B014
                failures += 1
                self.failed.set()
                log.warning("%s: %s: %s; retrying", self.name, type(exc).__name__, exc)
                await self._sleep(self._retry_delay(failures))
