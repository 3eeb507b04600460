"""Each component takes its own typed config (issue 36 item 1): the stack and the collector
actor are built from pydantic models the driver splits from the run's config once
(``dockyard.train.algorithms.configs``), and each model holds exactly what its component reads.
No Ray here: the split and the signatures only (the stack itself runs in every GRPO test)."""

from __future__ import annotations

import inspect
import typing

import pytest
from pydantic import BaseModel, ValidationError

from dockyard.core.config import config_from_dict
from dockyard.train.algorithms.configs import (
    collector_config,
    stack_config,
    trainer_fleet_config,
)
from dockyard.train.eval.fleet import Evaluator, run_model
from dockyard.train.runtime.collector import CollectorHost
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.stack import Stack, StackConfig


@pytest.mark.parametrize(
    ("builds", "param", "config"),
    [
        (Stack.__init__, "cfg", StackConfig),
        (CollectorHost.__init__, "config", CollectorConfig),
        (Evaluator.__init__, "config", CollectorConfig),
        (run_model, "stack_cfg", StackConfig),
        (run_model, "collector_cfg", CollectorConfig),
    ],
)
def test_each_component_is_built_from_its_typed_config(builds, param, config) -> None:
    hints = typing.get_type_hints(builds)
    assert hints[param] is config
    assert issubclass(config, BaseModel)
    assert config.model_config.get("extra") == "forbid"  # a key it does not read is an error
    # and nothing typed Any that could carry the whole run's config
    loose = [n for n, p in inspect.signature(builds).parameters.items()
             if n in ("cfg", "master", "config") and hints.get(n) is typing.Any]  # fmt: skip
    assert not loose


def _master(**sections):
    base = {
        "policy": {"model_name": "m", "max_total_sequence_length": 64,
                   "train_global_batch_size": 24, "train_micro_batch_size": 4,
                   "generation": {"max_new_tokens": 16}},
        "grpo": {"num_prompts_per_step": 3, "num_generations_per_prompt": 8, "seed": 11,
                 "async_grpo": {"enabled": True, "max_trajectory_age_steps": 2}},
        "cluster": {"sandbox_services": 2, "sandbox_workers": 3, "trainer_ranks": 2,
                    "trainer_cpus": "0"},
        "env": {"math": {}},
        "data": {"dataset_name": "gsm8k"},
    }  # fmt: skip
    for k, v in sections.items():
        base[k] = {**base.get(k, {}), **v}
    return config_from_dict(base)


def test_the_split_gives_each_fleet_its_part() -> None:
    cfg = _master()
    s = stack_config(cfg)
    assert s.cluster is cfg.cluster
    assert s.trainer is not None
    assert s.trainer.worker == "dockyard.torch.worker:TorchPolicyWorker"
    assert (s.trainer.ranks, s.trainer.cpus) == (2, "0")
    assert s.trainer.worker_config["seed"] == 11  # the backend's own config, as a dict
    assert s.engines.model == "m"
    assert s.engines.options["seed"] == 11
    assert s.weight_transport is cfg.data_plane.weight_transport
    assert s.overlap
    assert s.buffer_age_bound == 2
    assert s.env_name == "math"
    assert s.sandbox is None
    assert s.judge is None
    # an environment that runs code gets the sandbox fleet the cluster section asks for
    code = stack_config(_master(env={"code": {}}, data={"env_name": "code"}))
    assert code.sandbox is not None
    assert (code.sandbox.services, code.sandbox.workers) == (2, 3)
    # ... unless its entry names running services
    given = _master(env={"code": {"sandbox_urls": ["http://a:1"]}}, data={"env_name": "code"})
    assert stack_config(given).sandbox is None


def test_the_drivers_variants_of_the_stack() -> None:
    cfg = _master()
    evaluation = stack_config(cfg, trainer=None)
    assert evaluation.trainer is None
    assert evaluation.buffer_age_bound == 2
    pairs = stack_config(
        cfg, trainer=trainer_fleet_config(cfg, train_micro_batch_size=8), environment=False
    )
    assert pairs.trainer is not None
    assert pairs.trainer.worker_config["train_micro_batch_size"] == 8
    assert (pairs.env_name, pairs.sandbox, pairs.judge, pairs.buffer_age_bound) == (
        None, None, None, None
    )  # fmt: skip
    jax = stack_config(_master(policy={"dtensor_cfg": {"enabled": False},
                                       "jax_cfg": {"enabled": True}},
                               cluster={"trainer_ranks": 1}))  # fmt: skip
    assert jax.trainer is not None
    assert jax.trainer.worker == "dockyard.jax.worker:JaxPolicyWorker"


def test_a_judged_environment_gets_its_judge_fleet_or_a_clear_error() -> None:
    judged = {"env": {"gdpval": {}}, "data": {"env_name": "gdpval", "dataset_name": None,
                                            "train_path": "x.jsonl"}}  # fmt: skip
    with pytest.raises(ValueError, match=r"set judge\.model_name"):
        stack_config(_master(**judged))
    s = stack_config(_master(**judged, judge={"model_name": "j", "num_engines": 2}))
    assert s.judge is not None
    assert (s.judge.model_name, s.judge.num_engines, s.judge.seed) == ("j", 2, 11)
    openai = _master(**judged, judge={"backend": "openai", "base_url": "http://x/v1"})
    assert stack_config(openai).judge is None  # an endpoint, no fleet


def test_the_collector_gets_its_part_and_nothing_else() -> None:
    cfg = _master()
    c = collector_config(cfg, prompts_per_step=3, age_bound=2)
    assert (c.env_name, c.seed, c.samples_per_prompt) == ("math", 11, 8)
    assert c.max_groups_in_flight == 9  # P · (A + 1)
    assert c.prompts.max_input_tokens == 64 - 16
    with pytest.raises(ValidationError):
        CollectorConfig(**{**c.model_dump(), "grpo": {}})  # no room for the run's config
    with pytest.raises(ValidationError):
        StackConfig(**{**dict(stack_config(cfg)), "policy": cfg.policy})
