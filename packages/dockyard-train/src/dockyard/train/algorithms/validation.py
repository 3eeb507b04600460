"""The GRPO loop's validations: the held-out pass rate (every loss), and the distillation's
held-out KL to the teacher on the same samples (:mod:`.distillation`'s, through
:class:`.grpo.LoopLoss`). Both run on the collector actor and, for the KL, the trainer."""

from __future__ import annotations

from typing import Any

import ray

from dockyard.core.config import MasterConfig
from dockyard.train.algorithms.configs import batch_options
from dockyard.train.batching import build_batch, trainer_view
from dockyard.train.runtime.collector import validation_metrics


def pass_rate(collector: Any, tasks: list[dict[str, Any]], cfg: MasterConfig) -> dict[str, float]:
    """Held-out pass rate of ``grpo.val_samples_per_prompt`` samples per task at
    ``grpo.val_temperature`` (None: the training temperature; 0: greedy)."""
    out: dict[str, float] = ray.get(pass_rate_ref(collector, tasks, cfg))
    return out


def pass_rate_ref(collector: Any, tasks: list[dict[str, Any]], cfg: MasterConfig) -> Any:
    """:func:`pass_rate` started, not waited for (its ObjectRef)."""
    g = cfg.grpo
    t = cfg.policy.generation.temperature if g.val_temperature is None else g.val_temperature
    return collector.validate.remote(tasks, g.val_samples_per_prompt, t)


def validate_distillation(
    stack: Any, collector: Any, tasks: list[dict[str, Any]], cfg: MasterConfig, loss_fn: Any
) -> dict[str, float]:
    """The held-out pass rate (as GRPO's validation) and ``val/distill_kl``: ``loss_fn`` on
    the same samples, evaluated by the trainer without a step."""
    g = cfg.grpo
    t = cfg.policy.generation.temperature if g.val_temperature is None else g.val_temperature
    n = g.val_samples_per_prompt
    groups = ray.get(collector.validation_groups.remote(tasks, n, t))
    out = validation_metrics(groups, n)
    if not any(not tr.infra_error for gr in groups for tr in gr.trajectories):
        return out
    batch = trainer_view(build_batch(groups, batch_options(cfg)))
    m = stack.trainer.loss_metrics(batch, loss_fn)
    out["val/distill_kl"] = float(m.get("distill_kl", float("nan")))
    out["val/distill_tokens"] = float(m["num_loss_tokens"])
    if "distill_aligned" in m:  # several / cross-tokenizer teachers: the aligned fraction
        out["val/distill_aligned"] = float(m["distill_aligned"])
    return out
