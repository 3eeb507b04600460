"""The JAX trainer backend as the runtime finds it: the entry point ``jax`` of the group
``dockyard.trainers`` (``dockyard.core.interfaces.TRAINER_BACKENDS``). The driver imports this
module to map the run's sections to the ranks' config; the worker (and JAX's devices) start in
each rank's process."""

from __future__ import annotations

from typing import Any

from dockyard.core.config.loss import LossConfig
from dockyard.core.config.policy import PolicyConfig
from dockyard.core.interfaces import TrainerBackend
from dockyard.jax.config import JaxPolicyConfig


def worker_config(
    policy: PolicyConfig,
    loss_fn: LossConfig | None,
    *,
    seed: int,
    max_steps: int,
    teachers: list[Any] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What each JAX rank receives (:meth:`JaxPolicyConfig.from_sections`, as a dict). The JAX
    worker runs no teachers: ``teachers`` is refused (the pre-flight says so first)."""
    if teachers:
        raise ValueError(
            "grpo.adv_estimator opd: the teachers run on the torch trainer; set "
            "policy.jax_cfg.enabled=false"
        )
    return JaxPolicyConfig.from_sections(policy, loss_fn, seed=seed, max_steps=max_steps).to_dict()


BACKEND = TrainerBackend(worker="dockyard.jax.worker:JaxPolicyWorker", config=worker_config)
