"""Threat row 25: a build step that floods the egress proxy cannot starve the service.

A ``network: true`` step can skip the in-jail forwarder and connect straight to the proxy's unix
socket (it is mounted in the jail). Here a real step in a real jail of the real service opens
300 connections to that socket and dribbles one byte per half second into each, never finishing
a request head. The proxy must hold the service's threads and fds to a bound (a per-build cap on
concurrent connections, no thread per connection) and close every connection by the total
head deadline (a per-byte timeout would restart at every byte and keep them all open).
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.egress import HEAD_DEADLINE_S, MAX_CONNECTIONS, MOUNT, SOCKET
from dockyard.sandbox.envspec import EnvSpec
from dockyard.sandbox.launch import ServiceHandle

N = 300
WATCH_S = HEAD_DEADLINE_S + 15  # the step gives up watching after this
THREAD_BOUND = 8  # threads the service may gain while the flood runs
FD_BOUND = MAX_CONNECTIONS + 32  # fds it may gain: the capped connections, the jail's pipes

FLOOD = f"""
import collections, json, select, socket, time
t0 = time.monotonic()

def answer(s):
    try:
        return s.recv(64)[:12].decode("latin-1")
    except OSError as e:
        return type(e).__name__

socks, failed, closed = [], 0, {{}}
while len(socks) + failed < {N}:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect("{MOUNT}/{SOCKET}")
    except BlockingIOError:  # the listen backlog is full: try again, for 10 s at most
        s.close()
        if time.monotonic() - t0 > 10:
            failed += 1
        time.sleep(0.01)
        continue
    except OSError:
        failed += 1
        s.close()
        continue
    socks.append(s)
    try:
        s.send(b"G")  # the start of a request head that never ends
    except OSError:  # the proxy answered (503 over its cap) and closed before this byte
        closed[len(socks) - 1] = (time.monotonic() - t0, answer(s))
opened_s = time.monotonic() - t0
while len(closed) < len(socks) and time.monotonic() - t0 < {WATCH_S}:
    for i, s in enumerate(socks):
        if i in closed:
            continue
        try:
            if select.select([s], [], [], 0)[0]:  # an answer or EOF: the proxy let go
                closed[i] = (time.monotonic() - t0, answer(s))
            else:
                s.send(b"E")
        except OSError as e:
            closed[i] = (time.monotonic() - t0, type(e).__name__)
    time.sleep(0.5)
print("FLOOD", json.dumps({{
    "opened": len(socks), "connect_failed": failed, "opened_s": round(opened_s, 1),
    "closed": len(closed), "still_open": len(socks) - len(closed),
    "last_closed_s": round(max((t for t, _ in closed.values()), default=0), 1),
    "answers": collections.Counter(a for _, a in closed.values()),
}}))
raise SystemExit(1)  # the log comes back with the failed build
"""


def _counts(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(ln.split()[1]) for ln in f if ln.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def _kinds(pid: int) -> dict[str, int]:
    """The process's fds by kind (``socket``, ``pipe``, a path's first two parts)."""
    out: dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            k = link.split(":")[0] if not link.startswith("/") else "/".join(link.split("/")[:3])
        except OSError:
            continue
        out[k] = out.get(k, 0) + 1
    return out


def test_row25_a_flood_of_half_open_connections_is_bounded_and_closed(
    net_service: ServiceHandle, net_sandbox: SandboxClient
):
    pid = net_service.pid
    warm = EnvSpec.model_validate({"network": True, "steps": [{"run": "exit 3"}]})
    with pytest.raises(SandboxRequestError):  # a build with a proxy before the baseline
        net_sandbox.create_session({"environment": warm.model_dump()})
    base_threads, base_fds = _counts(pid)
    peak = [base_threads, base_fds]
    at_peak: dict[str, int] = {}  # the service's fds by kind when they peaked
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            t, f = _counts(pid)
            if f > peak[1]:
                at_peak.update(_kinds(pid))
            peak[0], peak[1] = max(peak[0], t), max(peak[1], f)
            time.sleep(0.1)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    spec = EnvSpec.model_validate(
        {"network": True, "steps": [{"run": f"python - <<'EOF'\n{FLOOD}\nEOF"}]}
    )
    t0 = time.monotonic()
    try:
        with pytest.raises(SandboxRequestError) as e:
            net_sandbox.create_session({"environment": spec.model_dump()})
    finally:
        stop.set()
        w.join()
    took = time.monotonic() - t0
    log = e.value.detail["log"]
    line = next((ln for ln in log.splitlines() if ln.startswith("FLOOD ")), None)
    assert line is not None, log
    stats = json.loads(line[6:])
    print(stats, "threads", base_threads, "->", peak[0], "fds", base_fds, "->", peak[1], took)
    assert stats["opened"] + stats["connect_failed"] == N, stats
    assert stats["still_open"] == 0, stats  # nothing outlives the head deadline...
    assert stats["last_closed_s"] <= stats["opened_s"] + HEAD_DEADLINE_S + 3, stats
    assert stats["connect_failed"] == 0, stats
    assert peak[0] - base_threads <= THREAD_BOUND, (base_threads, peak)
    assert peak[1] - base_fds <= FD_BOUND, (base_fds, peak, at_peak)
    # and the service answers the next build at once
    assert net_sandbox.health()["status"] == "ok"
