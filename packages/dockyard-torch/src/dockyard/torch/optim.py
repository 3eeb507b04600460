"""The run config's optimizer and schedule (``dockyard.core.config.optim``) in ``torch.optim``.

=======  ============================================================================
adamw    ``torch.optim.AdamW`` (decoupled decay)
adam     ``torch.optim.Adam`` (``weight_decay`` is L2: added to the gradient)
sgd      ``torch.optim.SGD``, no momentum (``weight_decay`` is L2)
=======  ============================================================================

The schedule is a ``LambdaLR`` over core's :func:`~dockyard.core.config.optim.lr_factor`: the
rate of the t-th ``optimizer.step()`` is ``lr · f(t)``.
"""

from __future__ import annotations

import torch

from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor


def make_optimizer(params: list[torch.nn.Parameter], opt: OptimizerConfig) -> torch.optim.Optimizer:
    """``opt.name``'s ``torch.optim`` class over ``params`` (see the module docstring)."""
    if opt.name == "adamw":
        return torch.optim.AdamW(
            params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay
        )
    if opt.name == "adam":
        return torch.optim.Adam(
            params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay
        )
    if opt.name == "sgd":
        return torch.optim.SGD(params, lr=opt.lr, weight_decay=opt.weight_decay)
    raise ValueError(f"policy.optimizer.name {opt.name!r} has no torch.optim equivalent")


def build_optimizer(
    params: list[torch.nn.Parameter], opt: OptimizerConfig, sched: SchedulerConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """:func:`make_optimizer` with a ``LambdaLR`` implementing ``lr_factor``."""
    if not params:
        raise ValueError("no trainable parameters (LoRA target_modules matched nothing?)")
    optimizer = make_optimizer(params, opt)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: float(lr_factor(t, sched)))
    return optimizer, scheduler
