"""dockyard-serve's collective transport on CUDA: a sender and a receiver process
(``_collective_peer.py``) move ~20 MB in 4 MB buckets; the bytes that land on the receiver's
device equal those sent.

NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected"), so on a
one-GPU host the transport is checked three ways:

* ``gloo`` with CUDA buffers on that GPU (the transport's device path: buffers copied to the
  device, broadcast, received as views of one device buffer);
* ``nccl`` with both ranks on that GPU: NCCL refuses, and both sides raise the transport's
  named ``WeightSyncError`` (an acceptance fails the test);
* ``nccl`` across two GPUs, the real engine ↔ trainer path, when the host has two.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

PEER = Path(__file__).with_name("_collective_peer.py")
_spec = importlib.util.spec_from_file_location("dockyard_gpu_collective_peer", PEER)
assert _spec
assert _spec.loader
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)

REFUSALS = ("Duplicate GPU", "ncclInvalidUsage", "invalid usage")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transfer(backend: str, send_device: str, recv_device: str) -> tuple[dict, dict, str]:
    """Run both peers; returns (sender's last JSON line, receiver's, both exit codes and
    stderrs); a side that failed gives ``{"error": ..., "sync_error": ..., "message": ...}``."""
    common = {
        "host": "127.0.0.1",
        "port": _free_port(),
        "world_size": 2,
        "backend": backend,
        "timeout_s": 60,
    }
    sides = {
        "send": {**common, "device": send_device, "bucket_bytes": 4 << 20, "checksum": True},
        "receive": {**common, "device": recv_device, "rank": 1},
    }
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = {
        role: subprocess.Popen(
            [sys.executable, str(PEER), role, json.dumps(kw)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, kw in sides.items()
    }
    results, errors = {}, ""
    try:
        for role, proc in procs.items():
            out, err = proc.communicate(timeout=150)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            results[role] = json.loads(lines[-1]) if lines else {"error": "no output"}
            errors += f"--- {role} (exit {proc.returncode})\n{err[-4000:]}\n"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.communicate()
    return results["send"], results["receive"], errors


def assert_equal_bytes(sent: dict, got: dict, recv_device: str, errors: str) -> None:
    assert sent.get("sent") == peer.VERSION, errors
    assert got.get("version") == peer.VERSION, errors
    assert got["buckets"] >= 3, got  # 4 MB buckets; a larger tensor travels alone
    assert got["devices"] == [recv_device], got
    assert got["digest"] == peer.digest(peer.make_weights())


def _mb() -> float:
    return sum(a.nbytes for a in peer.make_weights().values()) / 1e6


def test_gloo_with_cuda_buffers_on_one_gpu(device, gpu_report) -> None:
    dev = "cuda:0" if device == "cuda" else "cpu"
    sent, got, errors = transfer("gloo", dev, dev)
    assert_equal_bytes(sent, got, dev, errors)
    gpu_report("collective_gloo_one_gpu", {"megabytes": _mb(), "receive_seconds": got["seconds"]})


def test_nccl_two_ranks_on_one_gpu(device, gpu_report) -> None:
    """NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected", every
    NCCL 2.x): the transport must surface that as its named error on both sides, within its
    timeout, never hang or hand over wrong bytes. Accepting is a failure too: the one-GPU
    engine-and-trainer layout would then need a test of its own."""
    if device != "cuda":
        pytest.skip("NCCL needs CUDA")
    import torch

    sent, got, errors = transfer("nccl", "cuda:0", "cuda:0")
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    for side in (sent, got):
        assert "error" in side, f"NCCL {nccl} accepted two ranks on one GPU: {side}"
        assert side.get("sync_error"), errors  # WeightSyncError / WeightSyncTimeout
        assert "collective/nccl" in side["message"], errors
    assert any(s in errors for s in REFUSALS), errors
    gpu_report("collective_nccl_one_gpu", {"outcome": "refused", "nccl": nccl})


def test_nccl_across_two_gpus(device, gpu_report) -> None:
    import torch

    if device != "cuda" or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    sent, got, errors = transfer("nccl", "cuda:0", "cuda:1")
    assert_equal_bytes(sent, got, "cuda:1", errors)
    gpu_report("collective_nccl_two_gpus", {"megabytes": _mb(), "receive_seconds": got["seconds"]})
