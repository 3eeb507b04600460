"""What both quickstarts share (`dockyard quickstart` and `--agent`): the command's arguments,
the tiny model, the torch worker their SFT warm starts train, and the progress bar.

:mod:`.quickstart` (single-turn) and :mod:`.quickstart_agent` (multi-turn) each import this
module, never each other's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

MAX_POSITIONS = 2048

SFT_STEPS = 400  # the single-turn warm start's default; the agent's is its own


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", default="results/quickstart", help="folder for models, logs, plot"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the model, data and sampling")
    parser.add_argument("--sft-steps", type=int, default=SFT_STEPS, help="SFT warm-start steps")
    parser.add_argument(
        "--sft-dir",
        default=None,
        help="folder of the warm-started model (default OUTPUT/sft_model_seedN); reused when it "
        "was warm-started with the same settings",
    )
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--sync", action="store_true", help="synchronous GRPO (age bound 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--agent",
        action="store_true",
        help="the multi-turn variant: tool calls (check, submit) in the sandbox, SFT on scripted "
        "episodes, then multi-turn GRPO (grpo_quickstart_agent.yaml; its own defaults for "
        "--output, --steps and --sft-steps)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="dotted config overrides (grpo.num_prompts_per_step=16)"
    )


def build_model(seed: int) -> Path:
    """The quickstart's tiny Qwen2 (random, seeded), cached by its settings (build_tiny_model)."""
    # lazy: dockyard-torch is optional (torch extra)
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=384,
        vocab_size=1024,
        # RoPE: the context length costs nothing here, and the example configs (code, swe,
        # terminal) reuse this model with prompts of up to 1.5k tokens
        max_position_embeddings=MAX_POSITIONS,
        seed=seed,
    )


def sft_worker(model_dir: Path, batch_size: int, lr: float, seed: int) -> Any:
    """The torch worker both quickstarts' SFT warm starts train: float32, no reference policy,
    micro-batches of ``batch_size``, AdamW at ``lr`` without weight decay, clipping at 1."""
    # lazy: dockyard-torch is optional (torch extra)
    from dockyard.torch.worker import TorchPolicyWorker

    return TorchPolicyWorker(
        {
            "model_name": str(model_dir),
            "precision": "float32",
            "train_micro_batch_size": batch_size,
            "logprob_batch_size": batch_size,
            "max_grad_norm": 1.0,
            "reference_policy": False,
            "seed": seed,
            "optimizer": {"lr": lr, "weight_decay": 0.0},
        }
    )


class ProgressBar:
    """A tqdm bar on stdout that an SFT loop logs its steps to (``log``, ``close``)."""

    def __init__(self, total: int, desc: str) -> None:
        self.bar = tqdm(total=total, desc=desc, file=sys.stdout, dynamic_ncols=True)

    def log(self, step: int, m: dict[str, float]) -> None:
        self.bar.set_postfix({"loss": f"{m.get('sft/loss', float('nan')):.3f}"}, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
