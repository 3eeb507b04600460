"""The warm pool's bookkeeping (warmpool.py) with plain objects standing in for containers; the
real containers it keeps are tested in test_layers.py."""

from __future__ import annotations

import itertools
import threading
import time

from dockyard.sandbox.warmpool import WarmPool


class Maker:
    """Numbered items; ``fail``: every make raises; ``freed``: what the pool disposed of."""

    def __init__(self, fail: bool = False):
        self.n = itertools.count()
        self.fail = fail
        self.freed: list[int] = []
        self.lock = threading.Lock()

    def make(self) -> int:
        if self.fail:
            raise RuntimeError("no room")
        return next(self.n)

    def free(self, item: int) -> None:
        with self.lock:
            self.freed.append(item)


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_kind_gets_as_many_as_were_asked_for_and_the_newest_kinds_fill_the_pool() -> None:
    m = Maker()
    pool: WarmPool[int] = WarmPool(2, m.free, idle_s=60)
    try:
        assert pool.take("a", lambda _: True, m.make) is None  # the first ask: a miss
        _until(lambda: pool.stats()["warm_ready"] == 1)
        time.sleep(0.1)
        assert pool.stats()["warm_ready"] == 1  # one ask, one ready (not size)
        got = pool.take("a", lambda _: True, m.make)
        assert got == 0
        _until(lambda: pool.stats()["warm_ready"] == 2)  # two asks: two, the cap
        for _ in range(3):  # each finds one ready
            _until(lambda: pool.stats()["warm_ready"] == 2)
            assert pool.take("a", lambda _: True, m.make) is not None
        _until(lambda: pool.stats()["warm_ready"] == 2)
        time.sleep(0.1)
        assert pool.stats()["warm_ready"] == 2
        assert pool.take("b", lambda _: True, m.make) is None  # kinds are apart
        s = pool.stats()
        assert (s["warm_hits"], s["warm_misses"]) == (4, 2)
        # the pool is full (2 in all): "b", asked for last, takes the place of one of "a"'s
        _until(lambda: pool.stats()["warm_made"] == s["warm_made"] + 1)
        assert len(m.freed) == 1
        assert pool.stats()["warm_ready"] == 2
        assert pool.take("b", lambda _: True, m.make) is not None
    finally:
        pool.close()
    assert sorted(m.freed) == sorted(set(m.freed))  # nothing freed twice
    assert pool.stats()["warm_ready"] == 0
    assert len(m.freed) == pool.stats()["warm_made"] - 5  # all not taken were freed


def test_a_stale_item_is_freed_at_the_take_and_never_handed_out() -> None:
    m = Maker()
    pool: WarmPool[int] = WarmPool(1, m.free, idle_s=60)
    try:
        pool.take("a", lambda _: True, m.make)
        _until(lambda: pool.stats()["warm_ready"] == 1)
        assert pool.take("a", lambda _: False, m.make) is None  # its pid 1 died, say
        assert m.freed == [0]
    finally:
        pool.close()


def test_an_idle_kind_is_dropped_and_its_items_freed() -> None:
    m = Maker()
    pool: WarmPool[int] = WarmPool(3, m.free, idle_s=0.3)
    try:
        pool.take("a", lambda _: True, m.make)
        _until(lambda: pool.stats()["warm_ready"] == 1)
        _until(lambda: m.freed == [0])  # not asked for in idle_s: freed by the filler
        assert pool.stats()["warm_ready"] == 0
    finally:
        pool.close()


def test_a_kind_whose_make_fails_is_dropped_and_a_size_of_0_is_off() -> None:
    m = Maker(fail=True)
    pool: WarmPool[int] = WarmPool(2, m.free, idle_s=60)
    try:
        assert pool.take("a", lambda _: True, m.make) is None
        _until(lambda: pool.stats()["warm_failed"] == 1)
        time.sleep(0.2)
        assert pool.stats()["warm_failed"] == 1  # dropped: not retried in a loop
    finally:
        pool.close()
    off: WarmPool[int] = WarmPool(0, m.free)
    assert off.take("a", lambda _: True, Maker().make) is None
    assert off.stats() == {"warm_ready": 0, "warm_hits": 0, "warm_misses": 0, "warm_made": 0,
                           "warm_failed": 0}  # fmt: skip


def test_a_make_waits_settle_s_after_the_take_and_after_the_previous_make() -> None:
    """A make shares the service's cores with the session that took the last item: it starts
    ``settle_s`` after the kind fell short, the next ``settle_s`` after the previous make."""
    m = Maker()
    pool: WarmPool[int] = WarmPool(2, m.free, idle_s=60, settle_s=0.3)
    try:
        t0 = time.monotonic()
        pool.take("a", lambda _: True, m.make)
        pool.take("a", lambda _: True, m.make)  # two asks: two wanted
        time.sleep(0.2)
        assert pool.stats()["warm_made"] == 0
        _until(lambda: pool.stats()["warm_made"] == 1)
        assert time.monotonic() - t0 >= 0.3
        _until(lambda: pool.stats()["warm_made"] == 2)
        assert time.monotonic() - t0 >= 0.6
    finally:
        pool.close()
