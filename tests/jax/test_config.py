"""``JaxPolicyConfig.from_sections``: every run-config key the JAX worker honours, and the
driver's split ``worker_config`` (what the trainer's Ray actor receives) delegating to it."""

from __future__ import annotations

from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.jax.config import JaxPolicyConfig


def _master(**policy: Any):
    d: dict[str, Any] = {
        "policy": {
            "model_name": "/m",
            "precision": "bfloat16",
            "train_micro_batch_size": 4,
            "train_global_batch_size": 16,
            "logprob_batch_size": 8,
            "max_grad_norm": 0.5,
            "optimizer": {"lr": 2e-6, "weight_decay": 0.1, "betas": [0.8, 0.95], "eps": 1e-6},
            "scheduler": {"name": "linear", "warmup_steps": 3, "min_lr_ratio": 0.2},
            "dtensor_cfg": {"enabled": False},
            "jax_cfg": {"enabled": True, "fsdp_size": 2, "tensor_parallel_size": 2},
            "generation": {"temperature": 0.7},
            "moe": {"router_load_balancing_type": "aux_loss", "expert_capacity_factor": 1.5},
            **policy,
        },
        "loss_fn": {"type": "clipped_pg", "reference_policy_kl_penalty": 0.02},
        "grpo": {"max_num_steps": 40, "seed": 7},
    }
    return config_from_dict(d)


def _from(m: Any) -> JaxPolicyConfig:
    """``m``'s sections and loop values, passed as the driver's split passes them."""
    return JaxPolicyConfig.from_sections(
        m.policy, m.loss_fn, seed=m.grpo.seed, max_steps=m.grpo.max_num_steps
    )


def test_every_key_is_mapped() -> None:
    cfg = _from(_master())
    assert cfg == JaxPolicyConfig(
        model_name="/m",
        precision="bfloat16",
        train_micro_batch_size=4,
        logprob_batch_size=8,
        max_grad_norm=0.5,
        generation_temperature=0.7,
        reference_policy=True,
        seed=7,
        optimizer={"lr": 2e-6, "weight_decay": 0.1, "betas": (0.8, 0.95), "eps": 1e-6},
        scheduler={"name": "linear", "warmup_steps": 3, "total_steps": 40, "min_lr_ratio": 0.2},
        mesh={"fsdp_size": 2, "tensor_parallel_size": 2},
        moe={"router_load_balancing_type": "aux_loss", "expert_capacity_factor": 1.5},
    )


def test_no_kl_penalty_no_reference_and_defaults() -> None:
    m = _master(logprob_batch_size=None, max_grad_norm=None)
    m = m.model_copy(
        update={"loss_fn": m.loss_fn.model_copy(update={"reference_policy_kl_penalty": 0.0})}
    )
    cfg = _from(m)
    assert cfg.reference_policy is False
    assert cfg.logprob_batch_size == 4
    assert cfg.max_grad_norm is None


def test_the_worker_config_is_from_sections_as_a_plain_dict() -> None:
    from dockyard.train.algorithms.configs import worker_config

    master = _master()
    d = worker_config(master)
    # the split passes grpo.seed (7) and grpo.max_num_steps (40)
    want = JaxPolicyConfig.from_sections(master.policy, master.loss_fn, seed=7, max_steps=40)
    assert d == want.to_dict()
    assert JaxPolicyConfig(**d) == want


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        ({"precision": "float16"}, "policy.precision=float16"),
        ({"lora": {"enabled": True}}, "policy.lora.enabled"),
    ],
)
def test_unsupported_keys_are_named(policy: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _from(_master(**policy))


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("scheduler", ["constant", "linear", "cosine"])
def test_every_optimizer_and_schedule_the_schema_offers_is_taken(
    optimizer: str, scheduler: str
) -> None:
    cfg = _from(
        _master(optimizer={"name": optimizer}, scheduler={"name": scheduler, "total_steps": 9})
    )
    assert (cfg.optimizer.name, cfg.scheduler.name) == (optimizer, scheduler)
    assert cfg.scheduler.total_steps == 9  # set in the run config: not grpo.max_num_steps
