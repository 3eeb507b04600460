"""Asynchronous vs synchronous GRPO on the same config: throughput and reward per wall-clock.

    python bench/async_vs_sync.py                    # quickstart recipe, age 0 vs 1, 2 runs each
    python bench/async_vs_sync.py --runs 3 --steps 20
    python bench/async_vs_sync.py policy.train_micro_batch_size=8   # a trainer-heavier regime

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

CURVES: dict[str, list[list[tuple[float, float]]]] = {}


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
        "--sft-dir",
        str(Path(args.output) / "sft_model"),
        "grpo.val_at_start=false",
        "grpo.max_val_samples=8",
        "checkpointing.enabled=false",
        *args.overrides,
    ]
    if mode == "sync":
        cmd.insert(cmd.index("--output"), "--sync")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{mode} run {i} failed")
    rows = [json.loads(x) for x in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    t = 0.0
    curve = []
    for r in rows:
        t += r["time/step_s"]
        curve.append((t, r.get("reward/mean", 0.0)))
    CURVES.setdefault(mode, []).append(curve)
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
    ap.add_argument("overrides", nargs="*", help="config overrides applied to both modes")
    args = ap.parse_args()
    res: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    for i in range(args.runs):  # interleaved, so drifting machine load hits both modes alike
        for m in ("sync", "async"):
            res[m].append(run(m, i, args))
            print(f"{m} run {i}: {res[m][-1]['s_per_step']:.2f} s/step", flush=True)
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
    ratio = med["async"]["steps_per_hour"] / med["sync"]["steps_per_hour"]
    print(f"\nthroughput ratio async/sync: {ratio:.2f}x")
    print(f"reward against wall-clock: {plot(Path(args.output) / 'reward_vs_time.png')}")
    return 0


def plot(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, color in (("sync", "tab:blue"), ("async", "tab:orange")):
        for i, curve in enumerate(CURVES.get(mode, [])):
            xs, ys = zip(*curve, strict=True)
            ax.plot(xs, ys, color=color, alpha=0.8, label=mode if i == 0 else None)
    ax.set_xlabel("wall-clock (s, training loop)")
    ax.set_ylabel("reward/mean")
    ax.set_title("async (age 1) vs sync (age 0) GRPO")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    sys.exit(main())
