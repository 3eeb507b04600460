"""Does DPO learn? Held-out preference accuracy of `dockyard dpo`'s driver, per step.

    python bench/dpo_learning.py                          # seeds 0 1, 40 steps
    python bench/dpo_learning.py --seeds 0 1 --png docs/images/dpo_accuracy.png

Each seed trains a fresh random tiny model (dockyard.torch.testing, one layer, hidden size 64:
the recipe of tests/train/test_dpo.py's learning test) with the DPO loss (β = 0.1, lr 3e-3) on
the shipped pairs of the quickstart's task (examples/data/dpo_{train,val}.jsonl: a correct
expression against a classic slip; the held-out specs are never trained on), 16 pairs a
step, evaluating the held-out pairs every ``--every`` steps. Prints one row per seed
(implicit-reward accuracy, the policy's own log-prob accuracy and the loss, first -> last;
seconds) and draws both accuracies of every seed as a PNG.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_seed(seed: int, steps: int, every: int, lr: float) -> tuple[dict[int, dict], float]:
    from transformers import AutoTokenizer

    from dockyard.core.rl import PreferenceLoss
    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.dpo import dpo, load_pairs

    tiny = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, seed=seed)
    data = REPO / "examples" / "data"
    train, val = load_pairs(data / "dpo_train.jsonl"), load_pairs(data / "dpo_val.jsonl")
    t0 = time.perf_counter()
    worker = TorchPolicyWorker({"model_name": str(tiny), "precision": "float32", "seed": seed,
                                "train_micro_batch_size": 64, "logprob_batch_size": 64,
                                "reference_policy": False,
                                "optimizer": {"lr": lr, "weight_decay": 0.0}})  # fmt: skip
    res = dpo(worker, AutoTokenizer.from_pretrained(str(tiny)), train, val,
              PreferenceLoss("dpo", {"beta": 0.1}), steps=steps, batch_size=16, seed=seed,
              val_period=every)  # fmt: skip
    return res.val, time.perf_counter() - t0


def plot(curves: dict[int, dict[int, dict]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, (seed, val) in enumerate(curves.items()):
        steps, color = sorted(val), f"C{i}"
        ax.plot(steps, [val[s]["preference_accuracy"] for s in steps], "o-", color=color,
                label=f"seed {seed}: implicit reward (β log π/π_ref)")  # fmt: skip
        ax.plot(steps, [val[s]["logp_accuracy"] for s in steps], "s--", color=color, alpha=0.6,
                label=f"seed {seed}: policy log-prob")  # fmt: skip
    ax.axhline(0.5, color="gray", ls=":", label="chance")
    ax.set_xlabel("training step (16 pairs)")
    ax.set_ylabel("held-out preference accuracy")
    ax.set_title("DPO (β = 0.1), tiny random model, quickstart pairs")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=5, help="held-out evaluation period")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--png", type=Path, default=Path("results/bench/dpo_accuracy.png"))
    args = parser.parse_args()
    curves = {}
    print("seed  accuracy (start -> end)  log-prob accuracy  loss (start -> end)  seconds")
    for seed in args.seeds:
        val, seconds = run_seed(seed, args.steps, args.every, args.lr)
        curves[seed] = val
        a, b = val[min(val)], val[max(val)]
        print(f"{seed:>4}  {a['preference_accuracy']:.3f} -> {b['preference_accuracy']:.3f}"
              f"{'':>11}{a['logp_accuracy']:.3f} -> {b['logp_accuracy']:.3f}"
              f"{'':>5}{a['loss']:.3f} -> {b['loss']:.3f}{'':>6}{seconds:.1f}", flush=True)  # fmt: skip
    plot(curves, args.png)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
