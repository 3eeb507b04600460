"""Weight-sync transports across real processes: round trips, versions, checksums, dead peers.

The sender runs in a separate process (``_peer.py``); the receiver in this one. Collective uses
real ``torch.distributed`` gloo groups.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.interfaces import WeightSyncError, WeightSyncTimeout
from dockyard.serve.transports import make_receiver, open_receiver

PEER = Path(__file__).with_name("_peer.py")
_spec = importlib.util.spec_from_file_location("dockyard_test_peer", PEER)
assert _spec
assert _spec.loader
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def configs(
    kind: str, tmp_path: Path, timeout_s: float, checksum: bool = True
) -> tuple[dict, dict]:
    """(sender kwargs, receiver kwargs) for one transport."""
    if kind == "shm":
        sock = str(tmp_path / "rx.sock")
        return (
            {
                "socket_path": sock,
                "timeout_s": timeout_s,
                "bucket_bytes": 40_000,
                "checksum": checksum,
            },
            {"socket_path": sock, "timeout_s": timeout_s},
        )
    if kind == "http":
        port = free_port()
        return (
            {
                "url": f"http://127.0.0.1:{port}",
                "timeout_s": timeout_s,
                "bucket_bytes": 40_000,
                "checksum": checksum,
                "chunk_bytes": 8192,
            },
            {"host": "127.0.0.1", "port": port, "timeout_s": timeout_s},
        )
    port = free_port()
    common = {
        "host": "127.0.0.1",
        "port": port,
        "world_size": 2,
        "backend": "gloo",
        "timeout_s": timeout_s,
    }
    return ({**common, "bucket_bytes": 40_000, "checksum": checksum}, {**common, "rank": 1})


def spawn(role: str, kind: str, kwargs: dict, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(PEER), role, kind, json.dumps(kwargs), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_ready(proc: subprocess.Popen) -> None:
    """Block until the peer has imported everything (start-up is not part of the timed sync)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert json.loads(line or "{}").get("ready"), (line, proc.stderr.read() if proc.stderr else "")


def receive_all(rx) -> tuple[int, int, dict[str, np.ndarray]]:
    got: dict[str, np.ndarray] = {}
    version = count = -1
    for count, b in enumerate(rx.receive(), start=1):  # noqa: B007 - count is the result
        version = b.version
        got.update({k: np.array(v) for k, v in b.tensors.items()})
    return version, count, got


KINDS = ["shm", "http", "collective"]


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_two_versions(kind: str, tmp_path: Path) -> None:
    """Two consecutive updates arrive intact (all dtypes, 0-d and empty tensors), in buckets of
    at most bucket_bytes, tagged with their version; the receiver is rebuilt from its spec."""
    skw, rkw = configs(kind, tmp_path, timeout_s=60)
    rx = open_receiver(make_receiver(kind, **rkw).spec())  # as the vLLM worker does
    proc = spawn("send", kind, skw, "3,4")
    try:
        for v in (3, 4):
            version, nbuckets, got = receive_all(rx)
            want = peer.make_weights(v)
            assert version == v
            assert nbuckets >= 3  # 40 kB buckets; the embedding alone is 76.8 kB
            assert got.keys() == want.keys()
            for k in want:
                assert got[k].dtype == want[k].dtype, k
                assert got[k].shape == want[k].shape, k
                np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert [json.loads(x).get("sent") for x in out.splitlines()] == [None, 3, 4]
    finally:
        proc.kill()
        proc.communicate()
        rx.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("failure", ["die", "hang"])
def test_dead_or_hung_sender_raises_within_timeout(kind: str, failure: str, tmp_path: Path) -> None:
    """A sender killed (or frozen) after its first bucket: the receiver raises a sync error
    naming the transport and the peer within the timeout, instead of hanging."""
    timeout_s = 4.0
    skw, rkw = configs(kind, tmp_path, timeout_s=timeout_s)
    rx = make_receiver(kind, **rkw)
    if kind == "collective":
        pytest.importorskip("torch.distributed")
    proc = spawn("send", kind, skw, "5", f"--{failure}-after", "2")
    try:
        wait_ready(proc)
        it = rx.receive()
        next(it)  # the first bucket arrives; the clock starts once the sync is under way
        t0 = time.monotonic()
        with pytest.raises(WeightSyncError) as info:
            list(it)
        elapsed = time.monotonic() - t0
        msg = str(info.value)
        assert kind in msg, msg
        assert "sender" in msg or "rank 0" in msg, msg
        assert elapsed < timeout_s + 3.0, (elapsed, msg)
        if failure == "hang":
            assert isinstance(info.value, WeightSyncTimeout), msg
    finally:
        proc.kill()
        proc.communicate()
        rx.close()


@pytest.mark.parametrize("kind", ["shm", "http"])
def test_dead_receiver_fails_the_sender(kind: str, tmp_path: Path) -> None:
    """The engine dies mid-sync: the trainer's send raises naming the receiver, within the timeout."""
    from dockyard.serve.transports import make_sender

    timeout_s = 4.0
    skw, rkw = configs(kind, tmp_path, timeout_s=timeout_s)
    proc = spawn("receive", kind, rkw, "1")
    sender = make_sender(kind, **skw)

    def buckets():
        for i, (k, v) in enumerate(peer.make_weights(1).items()):
            if i == 2:
                proc.kill()
                proc.communicate()
            yield {k: v}

    t0 = time.monotonic()
    try:
        with pytest.raises(WeightSyncError, match="receiver") as info:
            sender.send(buckets(), 1)
    finally:
        sender.close()
        proc.kill()
        proc.communicate()
    assert kind in str(info.value)
    assert time.monotonic() - t0 < 2 * timeout_s + 10  # includes the receiver's start-up


def test_checksum_mismatch_is_detected() -> None:
    """Bytes that do not match the header's CRC-32 are rejected by the receiver (which raises)
    and the sender hears about it."""
    import threading

    import httpx

    from dockyard.serve.transports import http, wire

    rx = http.HttpReceiver("127.0.0.1", 0, timeout_s=10)
    rx.open()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            list(rx.receive())
        except WeightSyncError as e:
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    w = {"w": np.arange(1000, dtype=np.float32)}
    h = wire.layout(w, 1, 0, True)
    h.checksum = wire.checksum(np.arange(1000, dtype=np.float32).view(np.uint8), h.nbytes) ^ 1
    sender = http.HttpSender(rx.url, timeout_s=10, checksum=True)
    with httpx.Client(timeout=10) as c, pytest.raises(WeightSyncError, match="checksum mismatch"):
        sender._put(c, h, w, "receiver")
    t.join(10)
    assert errors
    assert "checksum mismatch" in str(errors[0])
    rx.close()


def test_wire_rebucket_and_views() -> None:
    from dockyard.serve.transports import wire

    w = peer.make_weights(2)
    buckets = list(wire.rebucket([w], 40_000))
    assert [k for b in buckets for k in b] == list(w)
    for b in buckets:
        assert len(b) == 1 or sum(a.nbytes for a in b.values()) <= 40_000
    h = wire.layout(w, 7, 0, True)
    buf = np.zeros(h.nbytes, np.uint8)
    wire.pack_into(buf, w, h)
    out = wire.unpack(buf, wire.Header.from_json(json.loads(json.dumps(h.to_json()))))
    for k in w:
        np.testing.assert_array_equal(out[k], w[k])
        assert np.shares_memory(out[k], buf) or out[k].size == 0
    assert [(i, last) for i, last, _ in wire.with_last(iter([{}, {}, {}]))] == [
        (0, False),
        (1, False),
        (2, True),
    ]
    assert [(i, last) for i, last, _ in wire.with_last(iter([]))] == [(0, True)]
    with pytest.raises(TypeError, match="numpy"):
        wire.layout({"w": [1, 2]}, 0, 0, True)  # type: ignore[dict-item]


def test_unknown_transport_is_named() -> None:
    with pytest.raises(ValueError, match=r"'carrier-pigeon'.*collective"):
        make_receiver("carrier-pigeon")


def test_bfloat16_travels_by_name() -> None:
    """bf16 arrays (ml_dtypes, the JAX worker's export) pack, unpack and reach torch unchanged."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    torch = pytest.importorskip("torch")
    from dockyard.serve.transports import wire
    from dockyard.serve.transports.torch_dtypes import from_numpy, to_numpy

    a = np.linspace(-3, 3, 12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4)
    h = wire.layout({"w": a}, 1, 0, True)
    buf = np.zeros(h.nbytes, np.uint8)
    wire.pack_into(buf, {"w": a}, h)
    out = wire.unpack(buf, wire.Header.from_json(json.loads(json.dumps(h.to_json()))))["w"]
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out.astype(np.float32), a.astype(np.float32))
    t = from_numpy(out)
    assert t.dtype == torch.bfloat16
    assert torch.equal(t.float(), torch.from_numpy(a.astype(np.float32)))
    np.testing.assert_array_equal(to_numpy(t).astype(np.float32), a.astype(np.float32))


def test_stale_segments_of_dead_senders_are_removed(tmp_path: Path) -> None:
    from dockyard.serve.transports.shm import remove_stale_segments

    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(proc.stdout)
    (tmp_path / f"dockyard-{dead}-abc").write_bytes(b"x")
    (tmp_path / f"dockyard-{os.getpid()}-def").write_bytes(b"x")  # alive: kept
    (tmp_path / "other-file").write_bytes(b"x")
    assert remove_stale_segments(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"dockyard-{os.getpid()}-def", "other-file"]
    )


def _named_segments(*pids: int) -> list[str]:
    """``/dev/shm`` entries named after a sender in ``pids`` (``dockyard-<pid>-*``)."""
    return sorted(n for n in os.listdir("/dev/shm") for p in pids if n.startswith(f"dockyard-{p}-"))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
@pytest.mark.parametrize("failure", [None, "die", "hang-then-sigkill"])
def test_shm_leaves_nothing_in_dev_shm(failure: str | None, tmp_path: Path) -> None:
    """Segments never have a name in /dev/shm — mid-transfer, after a clean send + receive +
    close, or with the sender killed mid-transfer (nothing can run in a SIGKILLed process) —
    and the receiver keeps no descriptor open."""
    skw, rkw = configs("shm", tmp_path, timeout_s=4.0 if failure else 60.0)
    rx = make_receiver("shm", **rkw)
    fds = _open_fds()
    extra = {"die": ("--die-after", "2"), "hang-then-sigkill": ("--hang-after", "2")}
    proc = spawn("send", "shm", skw, "3" if failure else "3,4", *extra.get(failure or "", ()))
    try:
        wait_ready(proc)
        it = rx.receive()
        next(it)  # a bucket mapped on both sides
        assert _named_segments(proc.pid, os.getpid()) == []
        if failure == "hang-then-sigkill":
            proc.kill()
        if failure:
            with pytest.raises(WeightSyncError):
                list(it)
        else:
            list(it)
            assert receive_all(rx)[0] == 4
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:
        proc.kill()
        proc.communicate()
        rx.close()
    assert _named_segments(proc.pid, os.getpid()) == []
    assert _open_fds() <= fds


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
@pytest.mark.parametrize("tmpfile", [True, False])
def test_shm_sender_in_process_leaves_nothing(
    tmpfile: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-process sender (as in the trainer rank): a send, then the receiver killed
    mid-transfer, then close: nothing named in /dev/shm, no descriptor left open — also where
    the filesystem has no ``O_TMPFILE`` (segments are then unlinked as soon as created)."""
    from dockyard.serve.transports import make_sender

    if not tmpfile:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    skw, rkw = configs("shm", tmp_path, timeout_s=4.0)
    fds = _open_fds()
    sender = make_sender("shm", **skw)
    proc = spawn("receive", "shm", rkw, "2")
    try:
        sender.send([peer.make_weights(1)], 1)
        assert _named_segments(os.getpid()) == []

        def buckets():
            for i, (k, v) in enumerate(peer.make_weights(2).items()):
                if i == 2:
                    proc.kill()
                    proc.communicate()
                yield {k: v}

        with pytest.raises(WeightSyncError, match="receiver"):
            sender.send(buckets(), 2)
    finally:
        sender.close()
        proc.kill()
        proc.communicate()
    assert _named_segments(os.getpid(), proc.pid) == []
    assert _open_fds() <= fds
