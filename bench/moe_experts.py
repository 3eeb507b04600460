"""Grouped-GEMM experts vs the per-expert loop (dockyard.torch.moe.experts), forward + backward.

Rows of ``N·k`` token-expert assignments, sorted by expert with multinomial counts, go through
the SwiGLU experts (``gate_up [E, 2I, H]``, ``down [E, H, I]``); each configuration is timed as
the median of ``--repeats`` forward + backward passes after one warm-up, in float32 and bfloat16.
The two paths agree (tests/torch/test_moe.py); this measures only speed.

    .venv/bin/python bench/moe_experts.py             # the table in docs/packages/torch.md
    .venv/bin/python bench/moe_experts.py --smoke     # one small row
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dockyard.torch.moe.experts import grouped_ffn, loop_ffn

# (experts, top-k, tokens, hidden, expert width): a Qwen3-30B-A3B-like width ratio, scaled down
CONFIGS = [(8, 2, 1024, 256, 128), (32, 4, 1024, 256, 128), (128, 8, 512, 256, 64)]


def _time(ffn, x, counts, gu, down, repeats: int) -> float:
    def once() -> None:
        w = [gu.detach().requires_grad_(), down.detach().requires_grad_()]
        ffn(x, counts, w[0], w[1], torch.nn.functional.silu).float().square().mean().backward()

    once()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        once()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    configs = CONFIGS[:1] if args.smoke else CONFIGS
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| E | k | tokens | H | I | dtype | grouped ms | loop ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e, k, n, h, i in configs:
        g = torch.Generator().manual_seed(0)
        counts = torch.multinomial(torch.ones(e), n * k, replacement=True, generator=g)
        counts = counts.bincount(minlength=e)
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n * k, h, generator=g).to(dtype)
            gu = (torch.randn(e, 2 * i, h, generator=g) * h**-0.5).to(dtype)
            down = (torch.randn(e, h, i, generator=g) * i**-0.5).to(dtype)
            tg = _time(grouped_ffn, x, counts, gu, down, args.repeats)
            tl = _time(loop_ffn, x, counts, gu, down, args.repeats)
            name = str(dtype).removeprefix("torch.")
            print(f"| {e} | {k} | {n} | {h} | {i} | {name} | {tg * 1e3:.1f} | {tl * 1e3:.1f} "
                  f"| {tl / tg:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
