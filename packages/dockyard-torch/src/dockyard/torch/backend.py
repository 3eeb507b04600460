"""The torch trainer backend as the runtime finds it: the entry point ``torch`` of the group
``dockyard.trainers`` (``dockyard.core.interfaces.TRAINER_BACKENDS``).

Light on purpose: the driver imports this module to map the run's sections to the ranks' config
(:class:`~dockyard.torch.config.TorchPolicyConfig`, pydantic only); the worker class, and torch
with it, is imported in each rank's process.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config.loss import LossConfig
from dockyard.core.config.policy import PolicyConfig
from dockyard.core.interfaces import TrainerBackend
from dockyard.torch.config import TorchPolicyConfig


def worker_config(
    policy: PolicyConfig,
    loss_fn: LossConfig | None,
    *,
    seed: int,
    max_steps: int,
    teachers: list[Any] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What each torch rank receives (:meth:`TorchPolicyConfig.from_sections`, as a dict);
    ``options`` (``policy.trainer_options``) is empty for this backend: it reads ``dtensor_cfg``."""
    own = TorchPolicyConfig.from_sections(
        policy, loss_fn, seed=seed, max_steps=max_steps, teachers=teachers
    )
    return own.to_dict()


BACKEND = TrainerBackend(worker="dockyard.torch.worker:TorchPolicyWorker", config=worker_config)
