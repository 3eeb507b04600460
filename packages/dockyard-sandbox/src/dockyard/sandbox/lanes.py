"""Bounded executors for the session routes, one per kind of call (a *lane*), so that one
tenant's long calls never stall another tenant's short ones, and the reaper never waits behind
a client (threat 26).

The session routes used to share asyncio's default thread pool (``min(32, cpus + 4)`` threads,
6 on a 2-core box) with the reaper: six sessions running ``sleep 12`` made an unrelated
session's ``get_file`` wait 10.5 s. Now each kind of call has threads of its own, sized from
the service's ``--workers`` (``W``):

* ``long`` — ``POST /v1/sessions`` (repository copy, provisioning, ``setup_command``),
  ``.../exec``, ``.../finish``: ``max(4, 2·W)`` threads (``--session-long-calls``);
* ``short`` — ``GET`` / ``PUT .../files``, ``DELETE /v1/sessions/{id}``: ``max(4, W)`` threads;
* ``tty`` — ``.../tty`` (keys, then up to ``wait_s`` ≤ 10 s for the screen): ``max(2, W)``
  threads, apart from ``short`` so that terminals waiting for their screens hold no file call up.

Admission: a call takes a free thread of its lane at once; when all are busy it waits in the
event loop (holding no thread), first come first served — at most ``queue`` calls per lane
(``long``: as many as its threads; ``short`` and ``tty``: 8× theirs), each for at most
``QUEUE_WAIT_S`` — and beyond either bound it is refused with HTTP 429, a message naming the
lane and ``Retry-After`` (the clients retry a 429 after it, up to their ``max_wait_s``). A thread
is given back when its call returns, not when the route is cancelled: a client that hangs up
frees nothing that still runs.

Per session, calls run one at a time, as before (each also takes the session's own lock in
sessions.py); they wait for their session in the event loop, at most ``SESSION_QUEUE`` per
session (then 429), so a tenant piling calls on its own busy session holds no thread.

:meth:`SessionLanes.reap` deletes expired sessions on a thread of its own, and only sessions that
no call holds or waits for (it holds the session's turn while it deletes): it never waits
behind a client, and a call arriving meanwhile waits, then finds the session gone (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from dockyard.sandbox.sessions import SessionManager

T = TypeVar("T")
Kind = Literal["long", "short", "tty"]
QUEUE_WAIT_S = 10.0  # longest a call waits for a thread of its lane before a 429
SESSION_QUEUE = 16  # calls waiting for one session's turn before a 429
RETRY_AFTER_S = 2


class Busy(Exception):
    """A call refused because its lane (or its session) is saturated: HTTP 429."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class LaneSizes:
    """Threads and queue bounds of the three lanes (see the module docstring)."""

    long: int
    short: int
    tty: int
    long_queue: int
    short_queue: int
    tty_queue: int

    @classmethod
    def for_workers(cls, workers: int, long: int | None = None) -> LaneSizes:
        """``long``: ``max(4, 2·workers)`` threads unless given; ``short``: ``max(4, workers)``;
        ``tty``: ``max(2, workers)``; queues: ``long`` as many as its threads, the others 8×."""
        w = max(1, workers)
        n_long = long if long is not None else max(4, 2 * w)
        if n_long < 1:
            raise ValueError(f"--session-long-calls {n_long}: expected at least 1")
        n_short, n_tty = max(4, w), max(2, w)
        return cls(n_long, n_short, n_tty, n_long, 8 * n_short, 8 * n_tty)


class Slots:
    """At most ``capacity`` holders; up to ``queue`` waiters in FIFO order, each for at most
    ``wait_s`` (None: no limit). :meth:`release` hands the slot to the next waiter."""

    def __init__(
        self, capacity: int, queue: int, wait_s: float | None, busy: Callable[[], str]
    ) -> None:
        self.capacity, self.queue, self.wait_s = capacity, queue, wait_s
        self.held = 0
        self._busy = busy
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def idle(self) -> bool:
        return self.held == 0 and not self._waiters

    async def acquire(self) -> None:
        if self.held < self.capacity and not self._waiters:
            self.held += 1
            return
        if len(self._waiters) >= self.queue:
            raise Busy(self._busy())
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        timer = loop.call_later(self.wait_s, self._expire, fut) if self.wait_s else None
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release()  # handed the slot just as the caller went away: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)

    def _expire(self, fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.set_exception(Busy(self._busy()))

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to this waiter: ``held`` is unchanged
                return
        self.held -= 1


class Lane:
    """One kind of call: its threads and their admission (a :class:`Slots` as wide)."""

    def __init__(self, name: str, threads: int, queue: int, wait_s: float = QUEUE_WAIT_S):
        self.name, self.threads = name, threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=f"session-{name}")
        self.slots = Slots(threads, queue, wait_s, self._busy)

    def _busy(self) -> str:
        return (
            f"the service's {self.threads} threads for {self.name} session calls are all busy "
            f"and {self.slots.waiting} calls wait for them (the most it queues, each for at "
            f"most {QUEUE_WAIT_S:g} s): retry after the Retry-After seconds, or run the service "
            "with more --workers / --session-long-calls"
        )

    def stats(self) -> dict[str, int]:
        return {
            "threads": self.threads,
            "running": self.slots.held,
            "waiting": self.slots.waiting,
            "queue": self.slots.queue,
        }


class SessionLanes:
    """The lanes, the per-session turns and the reaper's own thread (module docstring)."""

    def __init__(self, sizes: LaneSizes) -> None:
        self.sizes = sizes
        self.lanes: dict[str, Lane] = {
            "long": Lane("long", sizes.long, sizes.long_queue),
            "short": Lane("short", sizes.short, sizes.short_queue),
            "tty": Lane("tty", sizes.tty, sizes.tty_queue),
        }
        self._turns: dict[str, Slots] = {}  # a session's turn, while held or waited for
        self._reaper = ThreadPoolExecutor(1, thread_name_prefix="session-reaper")

    def stats(self) -> dict[str, dict[str, int]]:
        return {name: lane.stats() for name, lane in self.lanes.items()}

    def _turn(self, sid: str) -> Slots:
        turn = self._turns.get(sid)
        if turn is None:
            turn = self._turns[sid] = Slots(
                1,
                SESSION_QUEUE,
                None,
                lambda: (
                    f"session {sid} already has {SESSION_QUEUE} calls waiting for its turn "
                    "(calls to one session run one at a time): retry after the Retry-After seconds"
                ),
            )
        return turn

    def _leave(self, sid: str | None, turn: Slots | None) -> None:
        if sid is None or turn is None:
            return
        turn.release()
        if turn.idle() and self._turns.get(sid) is turn:
            del self._turns[sid]

    async def call(self, kind: Kind, sid: str | None, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on a thread of lane ``kind``, in session ``sid``'s turn (None: a
        call of no session yet, ``create``). Raises :class:`Busy` (429) when saturated."""
        turn = self._turn(sid) if sid is not None else None
        if turn is not None:
            try:
                await turn.acquire()
            except BaseException:
                if turn.idle() and self._turns.get(sid or "") is turn:
                    del self._turns[sid or ""]
                raise
        lane = self.lanes[kind]
        try:
            await lane.slots.acquire()
        except BaseException:
            self._leave(sid, turn)
            raise
        loop = asyncio.get_running_loop()

        def finished() -> None:  # in the loop, once the thread is done with the call
            lane.slots.release()
            self._leave(sid, turn)

        def done(_: Future[T]) -> None:  # in the worker thread (or here, if never started)
            with contextlib.suppress(RuntimeError):  # the loop is gone: the service is down
                loop.call_soon_threadsafe(finished)

        try:
            cf = lane.pool.submit(fn, *args)
        except BaseException:
            finished()
            raise
        cf.add_done_callback(done)
        return await asyncio.wrap_future(cf)

    async def reap(self, sessions: SessionManager) -> list[str]:
        """Delete the sessions idle past their ``ttl_s`` that no call holds or waits for, on
        the reaper's own thread; a session busy now is left for a later pass."""
        loop = asyncio.get_running_loop()
        gone: list[str] = []
        now = time.monotonic()
        for sid, s in list(sessions.sessions.items()):
            if now - s.last_used <= s.spec.ttl_s or sid in self._turns or s.lock.locked():
                continue
            turn = self._turn(sid)
            await turn.acquire()  # free now (checked above, nothing ran since): no wait
            try:
                if await loop.run_in_executor(self._reaper, sessions.delete, sid):
                    gone.append(sid)
            finally:
                self._leave(sid, turn)
        return gone

    def close(self) -> None:
        """Stop taking calls (those running finish on their threads; queued ones are dropped)."""
        for lane in self.lanes.values():
            lane.pool.shutdown(wait=False, cancel_futures=True)
        self._reaper.shutdown(wait=False, cancel_futures=True)
