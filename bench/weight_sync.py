"""Weight-sync transports against a plain in-memory copy, and vLLM generation via the adapter.

    .venv/bin/python bench/weight_sync.py                       # 10, 100, 300 MB; 3 runs each
    .venv/bin/python bench/weight_sync.py --sizes-mb 10,100,1000 --repeats 5
    .venv/bin/python bench/weight_sync.py --generation           # + adapter vs raw vLLM
    .venv/bin/python bench/weight_sync.py --skip-sync --engine-push --repeats 10  # small model

Part 1. For each payload size S (float32 tensors of 4 MiB, like a model's layers) the trainer
(this process) sends one update to an engine-side receiver in another process, `repeats` times;
a sync is timed from `send()` until it returns, i.e. until the receiver holds every byte
(shm: every bucket acknowledged; http: the last upload answered; collective: the closing
all-reduce). Baseline: `np.copyto` of the same bytes into a preallocated buffer, the physical
limit of moving S bytes once on this machine. Reported: median seconds, GB/s, and the ratio of
each transport's GB/s to the baseline's.

Part 2 (`--generation`). One vLLM engine; identical requests (P prompts x n samples, T tokens,
fixed seeds) go through `VLLMEngine.generate` and straight through `AsyncLLM.generate`,
alternating, `repeats` times; reported: median tokens/s and the adapter's overhead.

Part 3 (`--engine-push`). The weight push of a small model into a real vLLM engine: a tiny
Qwen2 of ~2.5M parameters (~10 MB float32; hidden 256, 2 layers, head_dim 32), one shm update
per repeat from a sender thread (the trainer) to `VLLMEngine.update_weights` (pause keeping
requests, load in vLLM's worker, resume), `--push-generating`: while the engine generates.
Reported per phase (median and range over the repeats, after one warm-up): the engine's
pause, the worker waiting for the bytes, vLLM's load (copy out of shared memory +
`load_weights`, which on the CPU re-packs every linear layer), the round trip to the worker,
the prefix-cache reset with the version bump, the resume; beside them the shm transport alone
(Part 1's measurement) and `np.copyto` of the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

TENSOR_BYTES = 4 << 20


def payload(nbytes: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    i = 0
    left = nbytes
    while left > 0:
        n = min(TENSOR_BYTES, left) // 4
        out[f"model.layers.{i}.weight"] = rng.standard_normal(n, dtype=np.float32)
        left -= n * 4
        i += 1
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receiver_main(kind: str, kwargs: dict, updates: int) -> None:
    """The engine side: receive `updates` updates, touching nothing (zero-copy where possible)."""
    from dockyard.serve.transports import make_receiver

    rx = make_receiver(kind, **kwargs)
    if kind != "collective":  # bind the listener now; the collective rendezvous needs the sender
        rx.open()  # type: ignore[attr-defined]
    else:
        import torch.distributed  # noqa: F401 - import before "ready" so it is not timed
    print("ready", flush=True)
    for _ in range(updates):
        n = 0
        for b in rx.receive():
            n += sum(a.nbytes for a in b.tensors.values())
    rx.close()


def bench_transport(
    kind: str, tensors: dict[str, np.ndarray], repeats: int, bucket_bytes: int
) -> list[float]:
    from dockyard.serve.transports import make_sender

    tmp = tempfile.mkdtemp()
    skw: dict[str, Any]
    rkw: dict[str, Any]
    if kind == "shm":
        sock = os.path.join(tmp, "rx.sock")
        skw, rkw = {"socket_path": sock}, {"socket_path": sock}
    elif kind == "http":
        port = free_port()
        skw, rkw = {"url": f"http://127.0.0.1:{port}"}, {"host": "127.0.0.1", "port": port}
    else:
        port = free_port()
        skw = {"host": "127.0.0.1", "port": port, "world_size": 2}
        rkw = {**skw, "rank": 1}
    rkw["timeout_s"] = skw["timeout_s"] = 300
    proc = subprocess.Popen(
        [sys.executable, __file__, "--_receiver", kind, json.dumps(rkw), str(repeats + 1)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} receiver did not start")
        sender = make_sender(kind, bucket_bytes=bucket_bytes, **skw)
        sender.send([tensors], 0)  # warm-up (connections, rendezvous, page faults)
        times = []
        for v in range(1, repeats + 1):
            t0 = time.perf_counter()
            sender.send([tensors], v)
            times.append(time.perf_counter() - t0)
        sender.close()
        proc.wait(timeout=300)
        return times
    finally:
        proc.kill()
        proc.wait()


def bench_copy(tensors: dict[str, np.ndarray], repeats: int) -> list[float]:
    dst = {k: np.empty_like(v) for k, v in tensors.items()}
    for k, v in tensors.items():  # warm-up: fault the destination pages in
        np.copyto(dst[k], v)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for k, v in tensors.items():
            np.copyto(dst[k], v)
        times.append(time.perf_counter() - t0)
    return times


def weight_sync_table(sizes_mb: list[int], repeats: int, bucket_mb: int, kinds: list[str]) -> None:
    print(
        f"# weight sync: median of {repeats} syncs, bucket {bucket_mb} MB, sender and receiver in separate processes"
    )
    print(f"{'payload':>9} {'transport':>11} {'median s':>10} {'GB/s':>8} {'vs copy':>8}")
    for mb in sizes_mb:
        tensors = payload(mb * 1_000_000)
        nbytes = sum(a.nbytes for a in tensors.values())
        base = statistics.median(bench_copy(tensors, repeats))
        rows = [("memcpy", base)]
        for kind in kinds:
            rows.append(
                (kind, statistics.median(bench_transport(kind, tensors, repeats, bucket_mb << 20)))
            )
        for name, t in rows:
            gbs = nbytes / t / 1e9
            print(f"{mb:>6} MB {name:>11} {t:>10.4f} {gbs:>8.2f} {base / t:>7.1%}", flush=True)


def generation_table(repeats: int, prompts: int, n: int, tokens: int) -> None:
    import asyncio
    import uuid

    from dockyard.core.interfaces import SamplingParams
    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir

    async def main() -> None:
        path = tiny_model_dir(
            tempfile.mkdtemp(),
            hidden_size=256,
            num_layers=4,
            num_heads=8,
            num_kv_heads=2,
            intermediate_size=512,
        )
        eng = await VLLMEngine(
            str(path), dtype="float32", max_model_len=1024, enforce_eager=True
        ).start()
        rng = np.random.default_rng(0)
        ps = [rng.integers(3, 500, size=16).tolist() for _ in range(prompts)]  # vocab 512
        sp = SamplingParams(n=n, max_tokens=tokens, temperature=1.0, seed=1)

        async def via_adapter() -> int:
            res = await asyncio.gather(*(eng.generate(p, sp) for p in ps))
            return sum(len(r.token_ids) for rs in res for r in rs)

        async def raw() -> int:
            from vllm.sampling_params import RequestOutputKind

            async def one(p: list[int], i: int) -> int:
                vsp = eng._vllm_params(sp, tokens, (sp.seed or 0) + i)
                vsp.output_kind = RequestOutputKind.FINAL_ONLY
                n_out = 0
                async for final in eng.llm.generate(
                    {"prompt_token_ids": p}, vsp, request_id=uuid.uuid4().hex
                ):
                    n_out = len(final.outputs[0].token_ids)  # FINAL_ONLY: one output
                return n_out

            counts = await asyncio.gather(*(one(p, i) for p in ps for i in range(n)))
            return sum(counts)

        await via_adapter()  # warm-up
        await raw()
        rates: dict[str, list[float]] = {"raw AsyncLLM": [], "VLLMEngine": []}
        for _ in range(repeats):
            for name, fn in (("raw AsyncLLM", raw), ("VLLMEngine", via_adapter)):
                t0 = time.perf_counter()
                ntok = await fn()
                rates[name].append(ntok / (time.perf_counter() - t0))
        eng.shutdown()
        base = statistics.median(rates["raw AsyncLLM"])
        print(
            f"\n# generation: {prompts} prompts x {n} samples x <= {tokens} tokens, model {path.name} "
            f"(hidden 256, 4 layers), median of {repeats}"
        )
        print(f"{'path':>14} {'tokens/s':>10} {'vs raw':>8}")
        for name, r in rates.items():
            m = statistics.median(r)
            print(f"{name:>14} {m:>10.0f} {m / base:>7.1%}")

    asyncio.run(main())


PUSH_MODEL = {  # ~2.5M parameters, ~10 MB in float32; vLLM's CPU attention wants head_dim >= 32
    "hidden_size": 256,
    "num_layers": 2,
    "num_heads": 8,
    "num_kv_heads": 4,
    "intermediate_size": 1024,
    "vocab_size": 1024,
}
PUSH_PHASES = (  # (label, key of VLLMEngine.last_update or of the sender's timing)
    ("update_weights", "total_s"),
    ("  pause", "pause_s"),
    ("  wait for bytes", "receive_s"),
    ("  vLLM load", "load_s"),
    ("  finalize", "finalize_s"),
    ("  rpc round trip", "rpc_overhead_s"),
    ("  prefix + version", "commit_s"),
    ("  resume", "resume_s"),
    ("sender.send", "send_s"),
)


async def _push_phases(eng, weights: dict[str, np.ndarray], repeats: int) -> dict[str, list]:
    """``repeats`` shm pushes of ``weights`` into ``eng`` (after one warm-up, which maps the
    segment): seconds per phase."""
    import threading

    from dockyard.serve.transports.shm import ShmReceiver, ShmSender

    sock = os.path.join(tempfile.mkdtemp(), "push.sock")
    rx = ShmReceiver(sock, timeout_s=120)
    await eng.open_receiver(rx)
    sender = ShmSender(sock, timeout_s=120)
    out: dict[str, list] = {label: [] for label, _ in PUSH_PHASES}
    first = eng.policy_version + 1
    for v in range(first, first + repeats + 1):
        sent: dict[str, float] = {}

        def trainer(v: int = v, sent: dict[str, float] = sent) -> None:
            t0 = time.perf_counter()
            sender.send([weights], v)
            sent["send_s"] = time.perf_counter() - t0

        thread = threading.Thread(target=trainer)
        thread.start()
        await eng.update_weights(rx, v)
        thread.join()
        lu = eng.last_update
        stats = {**lu, **sent, "rpc_overhead_s": lu["rpc_s"] - lu["seconds"]}
        if v > first:
            for label, key in PUSH_PHASES:
                out[label].append(stats[key])
    sender.close()
    return out


def engine_push_table(repeats: int, generating: bool) -> None:
    import asyncio

    from safetensors.numpy import load_file

    from dockyard.core.interfaces import SamplingParams
    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir

    path = tiny_model_dir(tempfile.mkdtemp(), **PUSH_MODEL)
    weights = load_file(str(path / "model.safetensors"))
    nbytes = sum(a.nbytes for a in weights.values())

    async def main() -> dict[str, list]:
        eng = await VLLMEngine(
            str(path), dtype="float32", max_model_len=512, enforce_eager=True, seed=0
        ).start()
        stop = asyncio.Event()

        async def generate() -> None:  # 8 prompts x 8 samples x 8 tokens, over and over
            sp = SamplingParams(n=8, max_tokens=8, temperature=1.0)
            prompts = [list(range(3 + i, 19 + i)) for i in range(8)]
            while not stop.is_set():
                await asyncio.gather(*(eng.generate(p, sp) for p in prompts))

        gen = asyncio.create_task(generate()) if generating else None
        try:
            return await _push_phases(eng, weights, repeats)
        finally:
            stop.set()
            if gen is not None:
                await gen
            await eng.aclose()

    phases = asyncio.run(main())
    phases["shm transport alone"] = bench_transport("shm", weights, repeats, 256 << 20)
    phases["np.copyto (baseline)"] = bench_copy(weights, repeats)
    base = statistics.median(phases["np.copyto (baseline)"])
    n_params = sum(a.size for a in weights.values())
    print(
        f"\n# engine push: {n_params / 1e6:.1f}M-parameter Qwen2, {nbytes / 1e6:.1f} MB float32, "
        f"{len(weights)} tensors, shm, {'while generating' if generating else 'engine idle'}; "
        f"median and range of {repeats}"
    )
    print(f"{'phase':<22} {'median ms':>10} {'min-max ms':>16} {'x copy':>8}")
    for label, ts in phases.items():
        m = statistics.median(ts)
        rng = f"{min(ts) * 1e3:.2f}-{max(ts) * 1e3:.2f}"
        print(f"{label:<22} {m * 1e3:>10.2f} {rng:>16} {m / base:>7.1f}x", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_receiver":
        receiver_main(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes-mb", default="10,100,300", help="payload sizes in MB (1 MB = 1e6 bytes)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=256)
    ap.add_argument("--transports", default="shm,http,collective")
    ap.add_argument("--generation", action="store_true", help="also compare adapter vs raw vLLM")
    ap.add_argument("--skip-sync", action="store_true", help="no Part 1 (transports alone)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--engine-push", action="store_true", help="small-model push, per phase")
    ap.add_argument("--push-generating", action="store_true", help="push while generating")
    a = ap.parse_args()
    if not a.skip_sync:
        weight_sync_table(
            [int(s) for s in a.sizes_mb.split(",")], a.repeats, a.bucket_mb, a.transports.split(",")
        )
    if a.generation:
        generation_table(a.repeats, a.prompts, a.samples, a.tokens)
    if a.engine_push or a.push_generating:
        engine_push_table(a.repeats, a.push_generating)


if __name__ == "__main__":
    main()
