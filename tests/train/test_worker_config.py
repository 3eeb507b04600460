"""The torch trainer's settings from a dockyard config: what it cannot honour is refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard.core.config import load_config
from dockyard.train.algorithms.configs import torch_worker_config

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "configs" / "grpo_quickstart.yaml"


def test_maps_the_policy_keys() -> None:
    cfg = load_config(
        QUICKSTART,
        ["policy.dtensor_cfg.tensor_parallel_size=2", "cluster.trainer_ranks=2", "grpo.seed=7"],
    )
    w = torch_worker_config(cfg)
    assert w["tensor_parallel_size"] == 2
    assert w["seed"] == 7
    assert w["optimizer"]["lr"] == cfg.policy.optimizer.lr


def test_the_moe_section_reaches_the_torch_worker() -> None:
    cfg = load_config(QUICKSTART, ["policy.moe.router_enable_expert_bias=false",
                                   "policy.moe.aux_loss_coeff=0.01",
                                   "policy.moe.router_load_balancing_type=aux_loss"])  # fmt: skip
    w = torch_worker_config(cfg)
    assert w["moe"]["router_enable_expert_bias"] is False
    assert w["moe"]["aux_loss_coeff"] == 0.01
    torch_config = pytest.importorskip("dockyard.torch.config")
    parsed = torch_config.TorchPolicyConfig(**w)  # the worker accepts what the driver sends
    assert parsed.moe == cfg.policy.moe


@pytest.mark.parametrize(("override", "key"), [("policy.precision=float16", "policy.precision")])
def test_refuses_what_it_cannot_honour(override: str, key: str) -> None:
    cfg = load_config(QUICKSTART, [override])
    with pytest.raises(ValueError, match=key):
        torch_worker_config(cfg)


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("scheduler", ["constant", "linear", "cosine"])
def test_every_optimizer_and_schedule_the_schema_offers_is_taken(
    optimizer: str, scheduler: str
) -> None:
    """What the schema accepts the torch worker implements (tests/torch/test_optim.py)."""
    torch_config = pytest.importorskip("dockyard.torch.config")
    overrides = [f"policy.optimizer.name={optimizer}", f"policy.scheduler.name={scheduler}"]
    cfg = load_config(QUICKSTART, [*overrides, "grpo.max_num_steps=11"])
    parsed = torch_config.TorchPolicyConfig(**torch_worker_config(cfg))
    assert (parsed.optimizer.name, parsed.scheduler.name) == (optimizer, scheduler)
    assert parsed.optimizer == cfg.policy.optimizer
    assert parsed.scheduler.total_steps == 11  # unset in the run config: grpo.max_num_steps


@pytest.mark.parametrize("section", ["sequence_packing", "dynamic_batching"])
def test_batching_modes_reach_the_torch_worker(section: str) -> None:
    cfg = load_config(
        QUICKSTART, [f"policy.{section}.enabled=true", f"policy.{section}.train_mb_tokens=512"]
    )
    w = torch_worker_config(cfg)
    assert w[section] == {"enabled": True, "train_mb_tokens": 512, "logprob_mb_tokens": 8192}
    torch_config = pytest.importorskip("dockyard.torch.config")
    parsed = torch_config.TorchPolicyConfig(**w)  # the worker accepts what the driver sends
    assert getattr(parsed, section).enabled
    assert getattr(parsed, section).train_mb_tokens == 512


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["policy.sequence_packing.enabled=true", "policy.dynamic_batching.enabled=true"],
            "policy.sequence_packing.enabled and policy.dynamic_batching.enabled",
        ),
        (
            [
                "policy.sequence_packing.enabled=true",
                "policy.jax_cfg.enabled=true",
                "policy.dtensor_cfg.enabled=false",
            ],
            "torch-trainer options",
        ),
    ],
)
def test_batching_modes_refuse_what_cannot_run(overrides: list[str], message: str) -> None:
    from dockyard.core.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(QUICKSTART, overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["cluster.trainer_ranks=3", "policy.dtensor_cfg.tensor_parallel_size=2"],
            r"tensor_parallel_size=2 must divide cluster\.trainer_ranks=3",
        ),
        (
            [
                "cluster.trainer_ranks=2",
                "policy.jax_cfg.enabled=true",
                "policy.dtensor_cfg.enabled=false",
            ],
            r"set cluster\.trainer_ranks=1",
        ),
    ],
)
def test_trainer_ranks_must_fit_the_trainer(overrides: list[str], message: str) -> None:
    from dockyard.core.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(QUICKSTART, overrides)


def test_trainer_ranks_that_fit_are_accepted() -> None:
    cfg = load_config(
        QUICKSTART, ["cluster.trainer_ranks=4", "policy.dtensor_cfg.tensor_parallel_size=2"]
    )
    assert cfg.cluster.trainer_ranks == 4
