"""AdamW and the learning-rate schedules of :class:`~dockyard.torch.config.SchedulerConfig`."""

from __future__ import annotations

import math

import torch

from dockyard.torch.config import OptimizerConfig, SchedulerConfig


def lr_factor(step: int, cfg: SchedulerConfig) -> float:
    """f(t) with η_t = η·f(t): linear warm-up over W steps, then constant or cosine to r."""
    W = cfg.warmup_steps
    if step < W:
        return (step + 1) / W
    if cfg.type == "constant":
        return 1.0
    span = max(cfg.total_steps - W, 1)
    progress = min((step - W) / span, 1.0)
    r = cfg.min_lr_ratio
    return r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    params: list[torch.nn.Parameter], opt: OptimizerConfig, sched: SchedulerConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over ``params`` with a ``LambdaLR`` implementing :func:`lr_factor`."""
    if not params:
        raise ValueError("no trainable parameters (LoRA target_modules matched nothing?)")
    optimizer = torch.optim.AdamW(
        params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: lr_factor(t, sched))
    return optimizer, scheduler
