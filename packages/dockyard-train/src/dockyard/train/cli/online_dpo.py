"""`dockyard online-dpo --config FILE [--output DIR] [overrides...]`: online DPO with an LLM judge.

Each step samples ``grpo.num_generations_per_prompt`` (K) candidates for
``grpo.num_prompts_per_step`` prompts of ``data.train_path`` from the policy's engines, ranks
them with the ``judge`` (its own vLLM fleet, ``judge.backend: engine``, or any
OpenAI-compatible URL, ``openai``), takes a DPO step (``loss_fn``: a preference loss) on each
prompt's best-vs-worst pair and pushes the weights to the engines. Held out
(``data.val_path``, else a tenth): the judge's win rate over the starting policy every
``grpo.val_period`` steps and at the end. The trained model goes to ``--output`` (default
``checkpointing.export_hf``, else ``LOG_DIR/model``).
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.core.rl import PreferenceLoss
from dockyard.train.algorithms.configs import prompt_renderer
from dockyard.train.algorithms.feedback import load_prompt_data, run_with_judge, sampling_params
from dockyard.train.algorithms.online_dpo import config_problems, online_dpo
from dockyard.train.cli.feedback_command import FeedbackCommand


def train(cfg: MasterConfig, out: str, progress: bool) -> tuple[Any, str]:
    """Start the policy's fleets and the judge, run :func:`online_dpo`, stop everything;
    ``(OnlineDPOResult, log folder)``."""
    g = cfg.grpo
    train, val = load_prompt_data(cfg)

    def body(policy: Any, judge: Any, tok: Any, log: Any) -> Any:
        return online_dpo(policy, judge, prompt_renderer(cfg, tok), train, val,
                          PreferenceLoss.from_config(cfg.loss_fn), sampling_params(cfg),
                          steps=g.max_num_steps, prompts_per_step=g.num_prompts_per_step,
                          seed=g.seed, val_period=g.val_period, val_at_end=g.val_at_end,
                          output_dir=out, log=log)  # fmt: skip

    return run_with_judge(cfg, "online-dpo", progress, body)


COMMAND = FeedbackCommand(
    name="online-dpo", example="online_dpo.yaml", override="judge.num_engines=2",
    problems=config_problems, train=train,
    summary=lambda cfg, r: f"online DPO ({cfg.loss_fn.type}): {len(r.history)} steps",
)  # fmt: skip
add_arguments, run = COMMAND.add_arguments, COMMAND.run
