"""Asynchronous vs synchronous GRPO on the same config: throughput and reward per wall-clock.

    python bench/async_vs_sync.py                    # quickstart recipe, age 0 vs 1, 2 runs each
    python bench/async_vs_sync.py --runs 3 --steps 20

Both modes start from the same SFT warm start (the quickstart's, built once) and differ only in
``grpo.async_grpo`` (``enabled: false`` vs ``max_trajectory_age_steps: 1`` with in-flight
updates). Prints medians over runs: steps per hour, seconds per step, time waiting for
generation, and the reward of the first and last steps; plus the async/sync throughput ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def run(mode: str, i: int, args: argparse.Namespace) -> dict[str, float]:
    out = Path(args.output) / f"{mode}{i}"
    cmd = [
        sys.executable,
        "-m",
        "dockyard.core.cli",
        "quickstart",
        "--seed",
        str(args.seed),
        "--steps",
        str(args.steps),
        "--no-progress",
        "--output",
        str(out),
        "grpo.val_at_start=false",
        "grpo.max_val_samples=8",
        "checkpointing.enabled=false",
    ]
    if mode == "sync":
        cmd.insert(-3, "--sync")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{mode} run {i} failed")
    rows = [json.loads(x) for x in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = rows[1:]  # the first step includes engine warm-up in both modes
    total = sum(r["time/step_s"] for r in steps)
    k = max(1, len(rows) // 4)
    return {
        "s_per_step": total / len(steps),
        "steps_per_hour": 3600 * len(steps) / total,
        "wait_gen_s": statistics.mean(r.get("time/wait_generation_s", 0.0) for r in steps),
        "train_s": statistics.mean(r.get("time/train_s", 0.0) for r in steps),
        "reward_first": statistics.mean(r.get("reward/mean", 0.0) for r in rows[:k]),
        "reward_last": statistics.mean(r.get("reward/mean", 0.0) for r in rows[-k:]),
        "staleness": statistics.mean(r.get("staleness/mean", 0.0) for r in steps),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="results/bench_async_vs_sync")
    args = ap.parse_args()
    res = {m: [run(m, i, args) for i in range(args.runs)] for m in ("sync", "async")}
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in res.items()}
    keys = [
        "steps_per_hour",
        "s_per_step",
        "wait_gen_s",
        "train_s",
        "staleness",
        "reward_first",
        "reward_last",
    ]
    print(f"| metric (median of {args.runs}) | sync (age 0) | async (age 1) | async/sync |")
    print("|---|---:|---:|---:|")
    for k in keys:
        s, a = med["sync"][k], med["async"][k]
        print(f"| {k} | {s:.3g} | {a:.3g} | {a / s if s else float('nan'):.2f} |")
    print(
        f"\nthroughput ratio async/sync: {med['async']['steps_per_hour'] / med['sync']['steps_per_hour']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
