"""Things made before they are asked for: a pool of ready items per kind, refilled off the path.

The sessions' use (sessions.py): a container session's start is mostly its container's — pid 1
setting up the namespaces and the overlay, the workspace with the image's WORKDIR copied in —
so after a session of one kind (an image, its limits) the service keeps a few more of that kind
ready, and the next request takes one instead of waiting for it.

* **How many:** at most ``size`` ready items in all (0: the pool is off); a kind wants as many
  as were asked for in the last ``idle_s`` seconds (a kind asked for once, one; a burst — a GRPO
  group's sessions — more), the most recently asked kind first: when the pool is full, a kind
  asked for more recently takes the place of a ready item of the least recently asked one.
* **Made off the path:** one thread of the pool's own makes them (``make``, given at the ask),
  never a client's, each ``settle_s`` after the kind fell short or after its previous make: a
  make started at once would share the service's two cores and its GIL with the very session
  that took the item, slowing its start and first command (by ~4 ms each here). A kind whose
  ``make`` fails is dropped (logged) until it is asked for again.
* **Never stale:** a kind not asked for in ``idle_s`` is freed; ``take`` checks each item with
  ``fresh`` (a container's pid 1 still alive, its image still mounted) and frees one that is
  not; ``close`` frees everything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("dockyard.sandbox")


@dataclass
class _Kind(Generic[T]):
    make: Callable[[], T]
    asks: deque[float] = field(default_factory=deque)  # when it was asked for (last idle_s)
    ready: deque[T] = field(default_factory=deque)
    due: float | None = None  # when its next make may start (None: it is not short)

    def want(self, size: int) -> int:
        return min(size, len(self.asks))


class WarmPool(Generic[T]):
    """Ready items per kind (module docstring); ``free`` disposes of one nobody will take."""

    def __init__(self, size: int, free: Callable[[T], None], idle_s: float = 120.0,
                 settle_s: float = 0.03):  # fmt: skip
        self.size, self.idle_s, self.settle_s, self._free = size, idle_s, settle_s, free
        self._kinds: dict[Hashable, _Kind[T]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.hits = self.misses = self.made = self.failed = 0
        self._doomed: list[T] = []  # dropped by the filler under the lock, freed outside it
        self._thread: threading.Thread | None = None

    def take(self, key: Hashable, fresh: Callable[[T], bool], make: Callable[[], T]) -> T | None:
        """A ready item of kind ``key`` (None: none ready, or the pool is off); the ask is
        counted and ``make`` kept for the refill, due ``settle_s`` later (module docstring)."""
        if self.size <= 0:
            return None
        stale: list[T] = []
        got: T | None = None
        with self._cond:
            if self._closed:
                return None
            kind = self._kinds.setdefault(key, _Kind(make))
            kind.make = make
            kind.asks.append(time.monotonic())
            while kind.ready and got is None:
                item = kind.ready.popleft()
                if fresh(item):
                    got = item
                else:
                    stale.append(item)
            if got is None:
                self.misses += 1
            else:
                self.hits += 1
            self._start()
            self._cond.notify()
        for item in stale:
            self._quietly(item)
        return got

    def stats(self) -> dict[str, int]:
        with self._cond:
            ready = sum(len(k.ready) for k in self._kinds.values())
        return {"warm_ready": ready, "warm_hits": self.hits, "warm_misses": self.misses,
                "warm_made": self.made, "warm_failed": self.failed}  # fmt: skip

    def close(self) -> None:
        with self._cond:
            self._closed = True
            items = [i for k in self._kinds.values() for i in k.ready]
            self._kinds.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=60)
        for item in items:
            self._quietly(item)

    # -- the filler ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="warm-pool", daemon=True)
            self._thread.start()

    def _next(self) -> tuple[tuple[Hashable, Callable[[], T]] | None, float]:
        """((key, make) of the most recently asked kind short of items, once its make is due
        and there is room — made, if need be, by dropping a ready item of the least recently
        asked kind — or None; how long to wait), after dropping kinds gone idle. Under the
        lock; what was dropped is freed by the caller."""
        now = time.monotonic()
        wait = min(self.idle_s, 5.0)
        short: list[tuple[Hashable, _Kind[T]]] = []
        for key, kind in list(self._kinds.items()):
            while kind.asks and now - kind.asks[0] > self.idle_s:
                kind.asks.popleft()
            if not kind.asks:
                del self._kinds[key]
                self._doomed.extend(kind.ready)
            elif len(kind.ready) < kind.want(self.size):
                short.append((key, kind))
            else:
                kind.due = None
        if not short:
            return None, wait
        key, kind = max(short, key=lambda kv: kv[1].asks[-1])
        if kind.due is None:
            kind.due = now + self.settle_s
        if kind.due > now:
            return None, kind.due - now
        if sum(len(k.ready) for k in self._kinds.values()) >= self.size:
            older = [k for k in self._kinds.values() if k.ready and k.asks[-1] < kind.asks[-1]]
            if not older:
                return None, wait
            self._doomed.append(min(older, key=lambda k: k.asks[-1]).ready.pop())
        kind.due = None  # set again from the make's end, if still short
        return (key, kind.make), 0.0

    def _fill(self) -> None:
        while True:
            with self._cond:
                job, wait = (None, 0.0) if self._closed else self._next()
                doomed, self._doomed = self._doomed, []
                if job is None and not doomed and not self._closed:
                    self._cond.wait(timeout=wait)
                    continue
                closed = self._closed
            for item in doomed:
                self._quietly(item)
            if closed:
                return
            if job is None:
                continue
            key, make = job
            try:
                item = make()
            except Exception:
                log.exception("warm pool: making a ready item failed; its kind is dropped")
                with self._cond:
                    self.failed += 1
                    self._kinds.pop(key, None)
                continue
            with self._cond:
                kind = self._kinds.get(key)
                if kind is not None and not self._closed:
                    kind.ready.append(item)
                    self.made += 1
                    item = None
            if item is not None:  # its kind went idle or the pool closed meanwhile
                self._quietly(item)

    def _quietly(self, item: T) -> None:
        try:
            self._free(item)
        except Exception:
            log.exception("warm pool: freeing a ready item failed")
