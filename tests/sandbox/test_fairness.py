"""Issue 34, item 3 (threat 26): one tenant's long session calls never stall another's short ones.

A real service (``start_service``, real bwrap) with ``--workers 1``: its long lane has
``max(4, 2·1) = 4`` threads and queues 4 more calls (lanes.py). Nine sessions each ``exec``
``sleep 12`` at once (more than the lane runs and queues; and more than asyncio's default pool,
6 threads on a 2-core box, that every session route and the reaper used to share). Meanwhile an
unrelated session's short calls — ``get_file``, ``put_file``, ``tty`` keys — must each answer
within ``SHORT_BOUND_S``; before the lanes, ``get_file`` took 10.5 s under six ``sleep 12``.
The calls beyond the lane's threads wait at most 10 s, then get 429; the one beyond its queue
gets 429 at once; both name the lane. A session idle past its ``ttl_s`` is reaped meanwhile
(the reaper has a thread of its own).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.lanes import Busy, LaneSizes, SessionLanes, Slots
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Verdict

N_LONG = 9  # sessions running `sleep 12`: 4 run, 4 wait, 1 is refused at once
SLEEP_S = 12  # longer than the 10 s a queued call waits: the waiting ones are refused
# The bound on one short call under that load: the worst of 51-114 calls measured 0.15-0.72 s
# over nine runs here (2 cores shared with other jobs), so 2 s leaves a wide margin on a loaded
# CI box; the old shared pool: get_file 11.1-11.3 s.
SHORT_BOUND_S = 2.0


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceHandle]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=1) as s:
        yield s


def _sessions_gauge(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    return float(
        next(
            ln.split()[1] for ln in text.splitlines() if ln.startswith("dockyard_sandbox_sessions ")
        )
    )


def _timed(fn, *args, **kw) -> tuple[float, httpx.Response]:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    r = fn(*args, **kw)
    return time.monotonic() - t, r


def test_long_calls_of_many_sessions_never_stall_a_short_call_of_another(
    svc: ServiceHandle,
) -> None:
    http = httpx.Client(
        base_url=svc.url, timeout=60, limits=httpx.Limits(max_connections=N_LONG + 8)
    )

    def create(ttl_s: float = 300) -> str:
        r = http.post("/v1/sessions", json={"ttl_s": ttl_s})
        assert r.status_code == 201, r.text
        return str(r.json()["session_id"])

    quiet = create()
    assert (
        http.put(f"/v1/sessions/{quiet}/files", params={"path": "a.txt"}, content=b"x").status_code
        == 204
    )
    # An agent process keeps running in the session between calls: its terminal churns files.
    churn = "(while :; do echo x > churn; rm -f churn; done) >/dev/null 2>&1 &"
    warm = http.post(f"/v1/sessions/{quiet}/tty", json={"keys": [churn, "<Enter>"], "wait_s": 0})
    assert warm.status_code == 200, warm.text  # the terminal's jail is up before the load
    busy = [create() for _ in range(N_LONG)]
    create(ttl_s=1.0)  # to be reaped while the long lane is full
    before = _sessions_gauge(http)

    go = threading.Barrier(N_LONG)

    def long_call(sid: str) -> tuple[float, httpx.Response]:
        go.wait()
        return _timed(
            http.post,
            f"/v1/sessions/{sid}/exec",
            json={"command": f"sleep {SLEEP_S}", "timeout_s": 60},
        )

    pool = ThreadPoolExecutor(N_LONG)
    t0 = time.monotonic()
    futs = [pool.submit(long_call, sid) for sid in busy]
    time.sleep(1.0)  # all nine are in: running, waiting or refused

    short: list[tuple[str, float, int]] = []
    detail: dict = {}
    reaped_at = None
    while time.monotonic() - t0 < SLEEP_S - 1.5:  # while the four sleeps still run
        for name, (dt, r) in (
            ("get_file", _timed(http.get, f"/v1/sessions/{quiet}/files", params={"path": "a.txt"})),
            ("put_file", _timed(http.put, f"/v1/sessions/{quiet}/files", params={"path": "b.txt"}, content=b"y" * 4096)),
            ("tty", _timed(http.post, f"/v1/sessions/{quiet}/tty", json={"keys": ["echo hi", "<Enter>"], "wait_s": 0})),
        ):  # fmt: skip
            short.append((name, dt, r.status_code))
        if detail.get("session_calls", {}).get("long", {}).get("waiting", 0) < 4:  # all in
            detail = http.get("/healthz", params={"detail": 1}).json()
        if reaped_at is None and _sessions_gauge(http) == before - 1:
            reaped_at = time.monotonic() - t0
        time.sleep(0.2)
    jobs = http.post(
        f"/v1/sessions/{quiet}/tty", json={"keys": ["clear; jobs", "<Enter>"], "wait_s": 0.5}
    )
    assert "Running" in jobs.json()["screen"], jobs.text  # the agent's churn ran all along
    long = [f.result() for f in futs]
    pool.shutdown()
    busy_total = next(
        (
            float(ln.split()[1])
            for ln in http.get("/metrics").text.splitlines()
            if ln.startswith('dockyard_sandbox_rejected_total{reason="calls_busy"}')
        ),
        None,
    )
    http.close()

    worst = max(short, key=lambda s: s[1])
    print(f"{len(short)} short calls under load, worst {worst[0]} {worst[1]:.3f} s; long calls:")
    print(sorted((round(dt, 2), r.status_code) for dt, r in long))
    assert all(code in (200, 204) for _, _, code in short), short
    assert worst[1] < SHORT_BOUND_S, short  # before the lanes: ~10 s (the sleeps' length)
    assert len(short) >= 15, short  # the loop really ran calls throughout the load

    lanes = detail["session_calls"]["long"]
    assert lanes["threads"] == 4, detail  # max(4, 2 * workers), workers = 1
    assert lanes["queue"] == 4, detail
    assert (lanes["running"], lanes["waiting"]) == (4, 4), detail

    ok = [dt for dt, r in long if r.status_code == 200]
    refused = [(dt, r) for dt, r in long if r.status_code == 429]
    assert len(ok) + len(refused) == N_LONG, [(dt, r.status_code, r.text) for dt, r in long]
    assert len(ok) >= 4, long
    assert all(dt >= SLEEP_S for dt in ok), ok
    at_once = [dt for dt, _ in refused if dt < SHORT_BOUND_S]  # beyond the queue: refused at once
    assert len(at_once) >= 1, [dt for dt, _ in refused]
    assert busy_total == len(refused)
    for _, r in refused:
        assert "long session calls are all busy" in r.json()["detail"], r.text
        assert int(r.headers["retry-after"]) >= 1

    # the reaper took the idle session (ttl 1 s) while every long thread was busy
    assert reaped_at is not None, "the idle session was not reaped during the load"
    assert reaped_at < SLEEP_S - 2, reaped_at


# -- the lanes' bookkeeping, without a service -----------------------------------------------------
def test_a_hung_up_call_keeps_its_thread_and_turn_until_it_returns() -> None:
    """A route cancelled (its client hung up) frees neither its lane thread nor its session's
    turn while the call still runs; both are free once it returns."""

    async def main() -> None:
        lanes = SessionLanes(
            LaneSizes(long=1, short=1, tty=1, long_queue=1, short_queue=1, tty_queue=1)
        )
        release = threading.Event()
        route = asyncio.create_task(lanes.call("long", "s1", release.wait, 10))
        await asyncio.sleep(0.1)
        route.cancel()
        await asyncio.sleep(0.1)
        assert lanes.stats()["long"]["running"] == 1  # still running on its thread
        second = asyncio.create_task(lanes.call("short", "s1", lambda: "second"))
        await asyncio.sleep(0.1)
        assert not second.done()  # the session's turn is still the first call's
        release.set()
        assert await asyncio.wait_for(second, 5) == "second"
        await asyncio.sleep(0.05)
        assert lanes.stats()["long"]["running"] == 0
        assert lanes._turns == {}  # no turn kept for an idle session
        lanes.close()

    asyncio.run(main())


def test_a_saturated_lane_queues_with_bounds_then_refuses() -> None:
    """Beyond the lane's threads calls wait (at most ``queue`` of them, each at most the wait
    bound); beyond either they get :class:`Busy` (429); a slot passes to the next waiter."""

    async def main() -> None:
        slots = Slots(1, 1, 0.3, lambda: "busy")
        await slots.acquire()  # the one thread
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0.05)
        with pytest.raises(Busy):  # the queue (1) is full: refused at once
            await slots.acquire()
        with pytest.raises(Busy):  # waited 0.3 s for the thread: refused
            await waiter
        assert (slots.held, slots.waiting) == (1, 0)
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0.05)
        slots.release()  # handed to the waiter
        await asyncio.wait_for(waiter, 1)
        assert (slots.held, slots.waiting) == (1, 0)
        slots.release()
        assert slots.idle()

    asyncio.run(main())


def test_lane_sizes_follow_the_worker_count() -> None:
    assert LaneSizes.for_workers(1) == LaneSizes(4, 4, 2, 4, 32, 16)
    assert LaneSizes.for_workers(8) == LaneSizes(16, 8, 8, 16, 64, 64)
    assert LaneSizes.for_workers(8, long=3).long == 3
    with pytest.raises(ValueError, match="session-long-calls"):
        LaneSizes.for_workers(2, long=0)


def test_a_429_past_max_wait_s_is_infra_error_for_exec_and_finish() -> None:
    """The clients retry 429 until ``max_wait_s``; a session call still refused then is the
    service being busy, so exec and finish give ``infra_error`` (masked), not a caller error."""
    refuse = httpx.MockTransport(
        lambda _: httpx.Response(429, json={"detail": "busy"}, headers={"retry-after": "0"})
    )
    with SandboxClient("http://sandbox", max_wait_s=0.2) as c:
        c._http = httpx.Client(base_url="http://sandbox", transport=refuse)
        r = c.exec("s1", "true")
        assert r.verdict == Verdict.infra_error
        assert "busy" in r.stderr
        assert c.finish("s1", {"test_command": "true"}).verdict == Verdict.infra_error
