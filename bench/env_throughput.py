"""Environment scoring throughput against a local sandbox service: code and swe samples/s.

For each worker count N (default 1, 2, 4, 8) a fresh ``dockyard-sandbox serve --workers N``
is started; the code environment scores HumanEval canonical solutions and the swe environment
scores gold patches of the shipped tasks (the libraries in turn), with 2·N requests in flight from one asyncio client.
Each cell is the median of ``--repeats`` runs (after one warm-up run). Every scored sample must
come back with reward 1 (the run fails loudly otherwise), so the figures are of real verdicts.

    .venv/bin/python bench/env_throughput.py [--workers 1 2 4 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from dockyard.envs.code import CodeEnvironment, load_humaneval
from dockyard.envs.swe import SweEnvironment, load_shipped_tasks, materialize
from dockyard.sandbox.launch import start_service


async def _throughput(env, samples, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one(task, response):
        async with sem:
            return await env.score(task, response)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(t, r) for t, r in samples))
    dt = time.perf_counter() - t0
    bad = [r.metadata for r in results if r.infra_error or r.rewards.get("reward/tests") != 1.0]
    if bad:
        raise RuntimeError(f"{len(bad)} samples did not score 1: {bad[:2]}")
    return len(samples) / dt


def _measure(env, samples, concurrency: int, repeats: int) -> float:
    async def go():
        try:
            await _throughput(env, samples[: max(2, concurrency)], concurrency)  # warm caches
            return [await _throughput(env, samples, concurrency) for _ in range(repeats)]
        finally:
            await env.aclose()

    return statistics.median(asyncio.run(go()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--code-samples", type=int, default=32)
    ap.add_argument("--swe-samples", type=int, default=24)
    args = ap.parse_args()

    he = load_humaneval()
    code_samples = [
        (t, "```python\n" + t["canonical_solution"] + "```") for t in he[: args.code_samples]
    ]
    by_repo: dict[str, list[dict]] = {}
    for t in load_shipped_tasks():
        by_repo.setdefault(t["repo"], []).append(t)
    interleaved = [t for group in zip(*by_repo.values(), strict=False) for t in group]
    swe_tasks = interleaved[: args.swe_samples]  # every shipped library, in turn
    swe_samples = [(t, "```diff\n" + materialize(t).patch + "```") for t in swe_tasks]

    rows = []
    for n in args.workers:
        with start_service(workers=n, queue_size=1024) as svc:
            code = _measure(CodeEnvironment(svc.url), code_samples, 2 * n, args.repeats)
            swe = _measure(SweEnvironment(svc.url), swe_samples, 2 * n, args.repeats)
        rows.append((n, code, swe))
        print(f"workers={n}: code {code:.2f}/s  swe {swe:.2f}/s", flush=True)

    base_code, base_swe = rows[0][1], rows[0][2]
    print(
        f"\nhost: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {args.repeats} runs"
    )
    print(
        f"{'workers':>7} | {'code samples/s':>14} | {'× N=1':>6} | {'swe samples/s':>13} | {'× N=1':>6}"
    )
    print("-" * 60)
    for n, c, s in rows:
        print(f"{n:>7} | {c:>14.2f} | {c / base_code:>6.2f} | {s:>13.2f} | {s / base_swe:>6.2f}")


if __name__ == "__main__":
    main()
