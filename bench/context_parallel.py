"""Context parallelism (dockyard.torch.context_parallel): memory and time of a training step on
long rows, one process vs two ranks splitting every sequence.

A Qwen2 model (hidden 256, 4 layers, 4 query / 2 KV heads) trains ``--rows`` rows of ``--width``
tokens (one micro-batch) with the clipped policy-gradient loss. Each configuration is a
``torch.distributed.run`` job of its own, one thread per rank: ``cp=1`` one process, ``cp=2``
two gloo ranks with FSDP2 over the pair. Every rank reports the growth of its peak resident
memory over its resident memory before the first step (``ru_maxrss`` − RSS: the step's
activations, logits and gradients, and on two ranks the gathered keys and values) and the
median of ``--repeats`` step times after one warm-up. Equality of the two is tested
(tests/torch/test_tensor_parallel.py); this measures only memory and time.

    .venv/bin/python bench/context_parallel.py             # the figures in docs/packages/torch.md
    .venv/bin/python bench/context_parallel.py --smoke     # short rows, one repeat
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = {"family": "qwen2", "hidden_size": 256, "num_layers": 4, "num_heads": 4,
         "num_kv_heads": 2, "max_position_embeddings": 8192}  # fmt: skip


def _rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def rank_job(out: Path, model: str, cp: int, rows: int, width: int, repeats: int) -> None:
    """One rank of a configuration (run by torch.distributed.run)."""
    import torch.distributed as dist

    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.testing import random_batch
    from dockyard.torch.worker import TorchPolicyWorker

    worker = TorchPolicyWorker({
        "model_name": model, "precision": "float32", "reference_policy": False,
        "train_micro_batch_size": rows, "context_parallel_size": cp,
    })  # fmt: skip
    batch = random_batch(rows, width, seed=0, prompt_len=width // 4)
    batch.attention_mask[:] = True  # every row the full width: the long-row case
    loss = PolicyLoss()
    before = _rss_mb()
    times = []
    for i in range(repeats + 1):
        t = time.perf_counter()
        worker.train_step(batch, loss)
        if i:  # the first is the warm-up
            times.append(time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    mine = {"step_s": statistics.median(times), "peak_growth_mb": peak - before}
    every = [mine]
    if dist.is_initialized():
        every = [{} for _ in range(dist.get_world_size())]
        dist.all_gather_object(every, mine)
    if worker.rank == 0:
        (out / f"cp{cp}.json").write_text(json.dumps(every))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(out: Path, model: str, cp: int, args: argparse.Namespace) -> list[dict[str, float]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={cp}",
           f"--master_port={_free_port()}", __file__, "--rank-job", str(out), model, str(cp),
           str(args.rows), str(args.width), str(args.repeats)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-4000:])
    return json.loads((out / f"cp{cp}.json").read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-job":
        out, model, *nums = sys.argv[2:]
        cp, rows, width, repeats = map(int, nums)
        rank_job(Path(out), model, cp, rows, width, repeats)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.width, args.repeats = 256, 1
    from dockyard.torch.testing import build_tiny_model

    model = str(build_tiny_model(**MODEL))
    with tempfile.TemporaryDirectory() as tmp:
        one = run(Path(tmp), model, 1, args)[0]
        two = run(Path(tmp), model, 2, args)
    worst = max(r["peak_growth_mb"] for r in two)
    slow = max(r["step_s"] for r in two)
    print(f"{args.rows} rows × {args.width} tokens, Qwen2 {MODEL['hidden_size']} × "
          f"{MODEL['num_layers']} layers, float32, one thread per rank")  # fmt: skip
    print("| ranks | peak memory growth per rank (MiB) | step (s, median) |")
    print("|---|---|---|")
    print(f"| 1 (cp=1) | {one['peak_growth_mb']:.0f} | {one['step_s']:.2f} |")
    print(f"| 2 (cp=2) | {worst:.0f} | {slow:.2f} |")
    print(f"cp=2 / cp=1: memory {worst / one['peak_growth_mb']:.2f}x, "
          f"step {slow / one['step_s']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
