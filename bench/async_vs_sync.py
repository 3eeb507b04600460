"""Asynchronous vs synchronous GRPO on the same config: throughput and reward per wall-clock.

    python bench/async_vs_sync.py                          # both regimes, 3 runs each
    python bench/async_vs_sync.py --regimes balanced --runs 5
    python bench/async_vs_sync.py --regimes quickstart policy.train_micro_batch_size=8

Each regime runs the same config twice over, differing only in ``grpo.async_grpo``
(``enabled: false`` vs ``max_trajectory_age_steps: 1`` with in-flight weight updates); runs of the
two modes alternate, so drifting machine load hits both alike. Two regimes:

* ``quickstart``: the quickstart's recipe from one shared SFT warm start (built once): the
  expression task scored by the sandbox service. Shows reward per step and per second of both
  modes. On one small CPU box scoring dominates its step and shares the cores the trainer
  needs, so asynchrony has little to overlap here.
* ``balanced``: generation and training of comparable length (on a 2-core box: ~1.0 s each
  per step, measured in sync mode) — a random-initialised Qwen2 (``--hidden 128 --layers 2``),
  8 prompts × 8 samples of ``--new-tokens 48`` on the arithmetic data, scored in-process by
  the math verifier (no sandbox). Throughput only: an untrained model earns no reward to
  compare. On another machine, tune the three flags until sync's ``wait_gen_s`` and
  ``train_s`` are close.
* ``disjoint``: ``balanced`` with the trainer and the engine on disjoint cores
  (``cluster.trainer_cpus`` = the first half of the machine's cores, ``cluster.inference_cpus``
  = the second half), in both modes — the topology of a GPU cluster, whose trainer and
  inference GPUs are disjoint: in sync mode each fleet's cores idle while the other works.
  32 new tokens per sample (not 48): the engine generates on half the cores, and sync's
  generation and training stay comparable.
  After both ``balanced`` and ``disjoint`` the bench also compares the fastest async with the
  fastest sync over the two placements.

Prints medians over runs per regime — steps per hour, seconds per step, time waiting for
generation, training time, staleness, the reward of the first and last quarter of the steps —
and the async/sync throughput ratio, next to the overlap bound ``sync s_per_step / max(gen,
train)``: what async would reach if generation and training ran on separate devices (on one
CPU box they share the cores, and each slows the other); draws reward against wall-clock for the quickstart regime.
The first step of every run (engine warm-up in both modes) is left out of the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CURVES: dict[str, list[list[tuple[float, float]]]] = {}
ASYNC = (
    "grpo.async_grpo={enabled: true, max_trajectory_age_steps: 1, in_flight_weight_updates: true}"
)
SYNC = (
    "grpo.async_grpo={enabled: false, max_trajectory_age_steps: 0, in_flight_weight_updates: false}"
)


NEW_TOKENS = {"balanced": 48, "disjoint": 32}  # sync's generation ≈ training, 2-core box


def balanced_config(out: Path, args: argparse.Namespace, regime: str) -> Path:
    """The ``balanced`` / ``disjoint`` regime's config (and its model), written under ``out``."""
    import yaml

    from dockyard.torch.testing import build_tiny_model

    model = build_tiny_model(
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.hidden // 32,  # vLLM's CPU attention wants head_dim >= 32
        num_kv_heads=max(1, args.hidden // 64),
        intermediate_size=3 * args.hidden,
        vocab_size=1024,
        max_position_embeddings=512,
        seed=0,
    )
    cfg = {
        "policy": {
            "model_name": str(model),
            "max_total_sequence_length": 128,
            "train_global_batch_size": 64,
            "train_micro_batch_size": 16,
            "precision": "float32",
            "optimizer": {"name": "adamw", "lr": 1.0e-4, "weight_decay": 0.0},
            "generation": {
                "backend": "vllm",
                "max_new_tokens": args.new_tokens or NEW_TOKENS[regime],
                "vllm_cfg": {
                    "gpu_memory_utilization": 0.1,
                    "enforce_eager": True,
                    "max_model_len": 256,
                },
            },
        },
        "grpo": {
            "num_prompts_per_step": 8,
            "num_generations_per_prompt": 8,
            "max_num_steps": args.steps,
            "max_num_epochs": 100,
            "val_at_start": False,
            "val_period": 0,
        },
        "env": {"math": {"type": "math"}},
        "data": {"dataset_name": "arithmetic"},
        "checkpointing": {"enabled": False},
        "data_plane": {"weight_transport": {"type": "shm", "timeout_s": 120}},
    }
    path = out / f"{regime}.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def command(regime: str, mode: str, out: Path, args: argparse.Namespace) -> list[str]:
    cli = [sys.executable, "-m", "dockyard.train.cli"]
    common = [f"logger.log_dir={out}/logs", *args.overrides]
    if regime == "quickstart":
        return [
            *cli,
            "quickstart",
            "--seed",
            str(args.seed),
            "--steps",
            str(args.steps),
            "--output",
            str(out),
            "--sft-dir",
            str(Path(args.output) / "sft_model"),
            *(["--sync"] if mode == "sync" else []),
            "--no-progress",
            "grpo.val_at_start=false",
            "grpo.max_val_samples=8",
            "checkpointing.enabled=false",
            *common,
        ]
    cfg = balanced_config(Path(args.output), args, regime)
    mode_override = SYNC if mode == "sync" else ASYNC
    if regime == "disjoint":
        common = [*disjoint_cores(), *common]
    return [*cli, "train", "--config", str(cfg), "--no-progress", mode_override, *common]


def disjoint_cores() -> list[str]:
    """Overrides putting the trainer on the first half of this machine's cores, the engine
    on the second half."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("the disjoint regime needs at least 2 cores")
    half = len(cores) // 2
    return [
        f"cluster.trainer_cpus={','.join(map(str, cores[:half]))}",
        f"cluster.inference_cpus={','.join(map(str, cores[half:]))}",
    ]


def run(regime: str, mode: str, i: int, args: argparse.Namespace) -> dict[str, float]:
    out = Path(args.output) / f"{regime}_{mode}{i}"
    proc = subprocess.run(command(regime, mode, out, args), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{regime} {mode} run {i} failed")
    rows = [json.loads(x) for x in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    t, curve = 0.0, []
    for r in rows:
        t += r["time/step_s"]
        curve.append((t, r.get("reward/mean", 0.0)))
    CURVES.setdefault(f"{regime}/{mode}", []).append(curve)
    steps = rows[1:]  # the first step includes engine warm-up in both modes
    total = sum(r["time/step_s"] for r in steps)
    k = max(1, len(rows) // 4)
    return {
        "steps_per_hour": 3600 * len(steps) / total,
        "s_per_step": total / len(steps),
        "wait_gen_s": statistics.mean(r.get("time/wait_generation_s", 0.0) for r in steps),
        "train_s": statistics.mean(
            r.get("time/train_s", 0.0) + r.get("time/logprobs_s", 0.0) for r in steps
        ),
        "staleness": statistics.mean(r.get("staleness/mean", 0.0) for r in steps),
        "reward_first": statistics.mean(r.get("reward/mean", 0.0) for r in rows[:k]),
        "reward_last": statistics.mean(r.get("reward/mean", 0.0) for r in rows[-k:]),
    }


def table(regime: str, res: dict[str, list[dict[str, float]]], runs: int) -> dict[str, float]:
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in res.items()}
    print(f"\n## {regime} (median of {runs} runs per mode)\n")
    print("| metric | sync (age 0) | async (age 1) | async/sync |")
    print("|---|---:|---:|---:|")
    for k in med["sync"]:
        s, a = med["sync"][k], med["async"][k]
        ratio = f"{a / s:.2f}" if s else "–"
        print(f"| {k} | {s:.3g} | {a:.3g} | {ratio} |")
    ratio = med["async"]["steps_per_hour"] / med["sync"]["steps_per_hour"]
    each = [a["steps_per_hour"] / s["steps_per_hour"] for s, a in zip(*res.values(), strict=True)]
    sync = med["sync"]
    bound = sync["s_per_step"] / max(sync["wait_gen_s"], sync["train_s"])
    print(
        f"\n{regime}: throughput ratio async/sync {ratio:.2f}x "
        f"(per pair of runs: {', '.join(f'{x:.2f}' for x in each)}); "
        f"overlap bound on separate devices {bound:.2f}x"
    )
    return {m: med[m]["s_per_step"] for m in med}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--regimes",
        nargs="+",
        choices=["quickstart", "balanced", "disjoint"],
        default=["quickstart", "balanced", "disjoint"],
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="results/bench_async_vs_sync")
    ap.add_argument("--hidden", type=int, default=128, help="balanced regime: model width")
    ap.add_argument("--layers", type=int, default=2, help="balanced regime: model depth")
    ap.add_argument(
        "--new-tokens",
        type=int,
        default=None,
        help="balanced/disjoint regimes: tokens per sample (default 48 / 32: generation on one "
        "core of two is slower, so disjoint generates less to stay ≈ training)",
    )
    ap.add_argument("overrides", nargs="*", help="config overrides applied to both modes")
    args = ap.parse_args()
    print(
        f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"{args.steps} steps per run, {args.runs} runs per mode",
        flush=True,
    )
    if "disjoint" in args.regimes:
        print(f"disjoint regime: {' '.join(disjoint_cores())}", flush=True)
    medians: dict[str, dict[str, float]] = {}
    for regime in args.regimes:
        res: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
        for i in range(args.runs):  # interleaved
            for m in ("sync", "async"):
                res[m].append(run(regime, m, i, args))
                print(f"{regime} {m} run {i}: {res[m][-1]['s_per_step']:.2f} s/step", flush=True)
        medians[regime] = table(regime, res, args.runs)
    if {"balanced", "disjoint"} <= medians.keys():
        sync = min(("balanced", "disjoint"), key=lambda r: medians[r]["sync"])
        asy = min(("balanced", "disjoint"), key=lambda r: medians[r]["async"])
        print(
            f"\nfastest async ({asy}, {medians[asy]['async']:.2f} s/step) vs fastest sync "
            f"({sync}, {medians[sync]['sync']:.2f} s/step) on this machine: "
            f"{medians[sync]['sync'] / medians[asy]['async']:.2f}x"
        )
    if any(k.startswith("quickstart/") for k in CURVES):
        print(f"\nreward against wall-clock: {plot(Path(args.output) / 'reward_vs_time.png')}")
    return 0


def plot(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, color in (("sync", "tab:blue"), ("async", "tab:orange")):
        for i, curve in enumerate(CURVES.get(f"quickstart/{mode}", [])):
            xs, ys = zip(*curve, strict=True)
            label = f"{mode} (age {0 if mode == 'sync' else 1})" if i == 0 else None
            ax.plot(xs, ys, color=color, alpha=0.8, label=label)
    ax.set_xlabel("wall-clock of the training loop (s)")
    ax.set_ylabel("reward/mean")
    ax.set_title("quickstart recipe: async vs sync GRPO")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    sys.exit(main())
