"""Does a vision-language policy learn the OSWorld toy desktop tasks? Warm start, then GRPO.

    python bench/osworld_learning.py                       # seeds 0 1 2
    python bench/osworld_learning.py --seeds 0 --steps 4   # a quick look

Per seed: `dockyard osworld warmstart` (a tiny random Qwen2-VL, SFT on the scripted oracle's
demonstrations of training tasks, screenshots as images) then `dockyard train` on
examples/configs/grpo_osworld.yaml from that model. The held-out success rate (the ``val``
split: 32 toy tasks of other seeds, 4 episodes each sampled at the policy's temperature, as the
config validates) is measured after the warm start (GRPO's validation at step 0) and after
GRPO; ``grpo.val_temperature=0 grpo.val_samples_per_prompt=1`` measures it greedy. One row per seed, then the medians; every figure is the
task evaluator's verdict on a real sandboxed desktop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "configs" / "grpo_osworld.yaml"


def dockyard(*args: str) -> None:
    cmd = [sys.executable, "-m", "dockyard.train.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-4000:])
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(args[:2])}")


def val_rows(log_dir: Path) -> dict[int, dict[str, float]]:
    """step -> held-out success, in all and per kind (metrics.jsonl's validation rows:
    ``val/pass_rate`` and ``val/pass_rate/<domain>``)."""
    rows = [json.loads(x) for x in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        int(r["step"]): {k.removeprefix("val/pass_rate").strip("/") or "all": v
                         for k, v in r.items() if k.startswith("val/pass_rate")}
        for r in rows if "val/pass_rate" in r
    }  # fmt: skip


def _pct(row: dict[str, float]) -> str:
    kinds = ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(row.items()) if k != "all")
    return f"{100 * row['all']:.1f}%" + (f" ({kinds})" if kinds else "")


def run_seed(seed: int, args: argparse.Namespace) -> tuple[dict, dict, float, float]:
    """(held-out success after the warm start, after GRPO — in all and per kind — warm start s,
    GRPO s)."""
    out = Path(args.output).resolve() / f"seed{seed}"
    t0 = time.perf_counter()
    dockyard(
        "osworld", "warmstart", "--config", str(CONFIG), "--output", str(out / "sft_model"),
        "--seed", str(seed), "--demos", str(args.demos), "--steps", str(args.sft_steps),
        "--no-progress",
    )  # fmt: skip
    t1 = time.perf_counter()
    dockyard(
        "train", "--config", str(CONFIG), "--no-progress", f"grpo.seed={seed}",
        f"policy.model_name={out}/sft_model", f"grpo.max_num_steps={args.steps}",
        f"logger.log_dir={out}/logs", f"checkpointing.checkpoint_dir={out}/ckpt",
        "checkpointing.enabled=false", *args.overrides,
    )  # fmt: skip
    rows = val_rows(out / "logs")
    return rows[0], rows[max(rows)], t1 - t0, time.perf_counter() - t1


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=16, help="GRPO steps")
    ap.add_argument("--demos", type=int, default=64, help="oracle demonstrations (train tasks)")
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--output", default="results/bench_osworld")
    ap.add_argument("overrides", nargs="*", help="dotted overrides of grpo_osworld.yaml")
    args = ap.parse_args()
    rows = []
    for s in args.seeds:
        warm, after, warm_s, grpo_s = run_seed(s, args)
        rows.append((warm["all"], after["all"]))
        print(f"seed {s}: warm start {_pct(warm)} -> GRPO {_pct(after)}  "
              f"(warm start {warm_s:.0f} s, GRPO {grpo_s:.0f} s)", flush=True)  # fmt: skip
    med = [100 * statistics.median(r[i] for r in rows) for i in range(2)]
    gains = sum(r[1] > r[0] for r in rows)
    print(f"median held-out success: {med[0]:.1f}% -> {med[1]:.1f}% ({len(rows)} seeds; "
          f"GRPO raised it in {gains})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
