"""`dockyard rlaif --config FILE [--output DIR] [overrides...]`: RLAIF / constitutional AI.

Each step samples ``grpo.num_generations_per_prompt`` answers for ``grpo.num_prompts_per_step``
prompts of ``data.train_path`` from the policy's engines; the ``judge`` (its own vLLM fleet,
``judge.backend: engine``, or any OpenAI-compatible URL, ``openai``) critiques each against
``rlaif.constitution_file``; ``rlaif.reviser`` (the policy or the judge) rewrites it; the pairs
(revision ≻ original) the pairwise judge prefers (``rlaif.check_revisions``) take a DPO step
(``loss_fn``: a preference loss) and the weights go to the engines. Held out
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
from dockyard.train.algorithms.rlaif import Constitution, config_problems, rlaif
from dockyard.train.cli.feedback_command import FeedbackCommand


def train(cfg: MasterConfig, out: str, progress: bool) -> tuple[Any, str]:
    """Start the policy's fleets and the judge, run :func:`rlaif`, stop everything;
    ``(RLAIFResult, log folder)``."""
    g, ra = cfg.grpo, cfg.rlaif
    train, val = load_prompt_data(cfg, "RLAIF")
    constitution = Constitution.from_config(ra)

    def body(policy: Any, judge: Any, tok: Any, log: Any) -> Any:
        return rlaif(policy, judge, prompt_renderer(cfg, tok), constitution, train, val,
                     PreferenceLoss.from_config(cfg.loss_fn), sampling_params(cfg),
                     steps=g.max_num_steps, prompts_per_step=g.num_prompts_per_step,
                     reviser=ra.reviser, check_revisions=ra.check_revisions,
                     critique_max_tokens=ra.critique_max_tokens, seed=g.seed,
                     val_period=g.val_period, val_at_end=g.val_at_end, output_dir=out, log=log)  # fmt: skip

    return run_with_judge(cfg, "rlaif", progress, body)


COMMAND = FeedbackCommand(
    name="rlaif", example="rlaif.yaml", override="rlaif.reviser=judge",
    problems=config_problems, train=train,
    summary=lambda cfg, r: (
        f"RLAIF ({cfg.loss_fn.type}, reviser {cfg.rlaif.reviser}): {len(r.history)} steps, "
        f"{int(sum(h['rlaif/pairs'] for h in r.history))} pairs"
    ),
)  # fmt: skip
add_arguments, run = COMMAND.add_arguments, COMMAND.run
