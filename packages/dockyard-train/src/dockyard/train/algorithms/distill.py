"""`dockyard distill`'s driver: on-policy distillation through the GRPO loop.

The student samples, a frozen teacher grades every sampled token: the GRPO loop (:mod:`.grpo`)
with the distillation loss (``loss_fn.type: distillation``) in place of the policy gradient —
same collector, buffer, weight push, asynchrony bound, checkpoints, fault handling. The loss,
its pre-flight and its validation (the held-out KL to the teacher) are
:mod:`.distillation`'s; this module checks a config built in code as the command's pre-flight
does, then runs the loop.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.train.algorithms.drivers import loss_problems
from dockyard.train.algorithms.grpo import GRPOResult
from dockyard.train.algorithms.grpo import train as grpo_train


def train(cfg: MasterConfig, **kwargs: Any) -> GRPOResult:
    """Distil ``cfg.loss_fn.teacher_model_name`` into ``policy.model_name`` on the student's own
    samples (see the module docstring); ``kwargs`` as :func:`.grpo.train`'s (``resume``,
    ``progress``, ``stack``, ``on_step``). The result's ``val`` holds ``val/pass_rate`` and
    ``val/distill_kl`` per validation step (0: before training)."""
    # a config built in code skips the command's pre-flight
    if problems := loss_problems(cfg, "distill"):  # the loss's own checks: grpo.LOOP_LOSSES
        raise ValueError(problems[0])
    return grpo_train(cfg, **kwargs)
