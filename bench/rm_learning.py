"""Does the reward model learn? Held-out pair accuracy of `dockyard rm`'s driver, per step.

    python bench/rm_learning.py                         # seeds 0 1 2 3, 30 steps
    python bench/rm_learning.py --seeds 0 1 --steps 60 --png docs/images/rm_accuracy.png

Each seed trains a fresh random tiny model (dockyard.torch.testing, one layer, hidden size 64)
with a new scalar head on the shipped pairs of the quickstart's task
(examples/data/dpo_{train,val}.jsonl: 272 training pairs, 32 held-out specs), 16 pairs a step,
evaluating the held-out pairs every ``--every`` steps. Prints one row per seed (accuracy and
loss, first -> last; seconds) and draws every seed's held-out accuracy curve as a PNG. The
learning test (tests/train/test_rm.py) holds these settings to its threshold.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_seed(seed: int, steps: int, every: int, lr: float) -> tuple[dict[int, dict], float]:
    from transformers import AutoTokenizer

    from dockyard.core.rl import BradleyTerryLoss
    from dockyard.torch.reward import TorchRewardWorker
    from dockyard.torch.testing import build_tiny_model
    from dockyard.train.algorithms.dpo import load_pairs
    from dockyard.train.algorithms.rm import parse_rm_pair, reward_modelling

    tiny = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    data = REPO / "examples" / "data"
    train = load_pairs(data / "dpo_train.jsonl", parse_rm_pair)
    val = load_pairs(data / "dpo_val.jsonl", parse_rm_pair)
    t0 = time.perf_counter()
    worker = TorchRewardWorker({"model_name": str(tiny), "precision": "float32", "seed": seed,
                                "train_micro_batch_size": 64, "logprob_batch_size": 64,
                                "optimizer": {"lr": lr, "weight_decay": 0.0}})  # fmt: skip
    res = reward_modelling(worker, AutoTokenizer.from_pretrained(str(tiny)), train, val,
                           BradleyTerryLoss(), steps=steps, batch_size=16, seed=seed,
                           val_period=every)  # fmt: skip
    return res.val, time.perf_counter() - t0


def plot(curves: dict[int, dict[int, dict]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for seed, val in curves.items():
        steps = sorted(val)
        ax.plot(steps, [val[s]["rm_accuracy"] for s in steps], "o-", label=f"seed {seed}")
    ax.axhline(0.5, color="gray", ls=":", label="chance")
    ax.set_xlabel("training step (16 pairs)")
    ax.set_ylabel("held-out pair accuracy")
    ax.set_title("reward model (Bradley–Terry), tiny random model, quickstart pairs")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=5, help="held-out evaluation period")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--png", type=Path, default=Path("results/bench/rm_accuracy.png"))
    args = parser.parse_args()
    curves = {}
    print("seed  accuracy (start -> end)  loss (start -> end)  seconds")
    for seed in args.seeds:
        val, seconds = run_seed(seed, args.steps, args.every, args.lr)
        curves[seed] = val
        a, b = val[min(val)], val[max(val)]
        print(f"{seed:>4}  {a['rm_accuracy']:.3f} -> {b['rm_accuracy']:.3f}"
              f"{'':>11}{a['loss']:.3f} -> {b['loss']:.3f}{'':>6}{seconds:.1f}", flush=True)  # fmt: skip
    plot(curves, args.png)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
