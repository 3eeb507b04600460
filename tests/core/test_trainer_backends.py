"""Trainer backends are a registry like the others (issue 36 item 3): ``policy.trainer_backend``
names an entry of the group ``dockyard.trainers`` — dockyard-torch's ``torch`` and
dockyard-jax's ``jax`` are entry points there, installed with their packages — checked by the
schema with "did you mean", agreeing with the built-ins' ``enabled`` flags. A third party's
backend trains in ``tests/integration/test_plugins.py``."""

from __future__ import annotations

import pytest

from dockyard.core.config import ConfigError, config_from_dict
from dockyard.core.interfaces import TRAINER_BACKENDS, TrainerBackend

JAX_ON = {"dtensor_cfg": {"enabled": False}, "jax_cfg": {"enabled": True}}


def test_the_built_in_backends_are_entry_points_of_their_packages() -> None:
    assert {"torch", "jax"} <= set(TRAINER_BACKENDS.names())
    torch, jax = TRAINER_BACKENDS.get("torch"), TRAINER_BACKENDS.get("jax")
    assert isinstance(torch, TrainerBackend)
    assert isinstance(jax, TrainerBackend)
    assert torch.worker == "dockyard.torch.worker:TorchPolicyWorker"
    assert jax.worker == "dockyard.jax.worker:JaxPolicyWorker"


@pytest.mark.parametrize(
    ("policy", "name"),
    [({}, "torch"), (JAX_ON, "jax"), ({"trainer_backend": "torch"}, "torch"),
     ({"trainer_backend": "jax", **JAX_ON}, "jax")],
)  # fmt: skip
def test_the_run_names_its_backend_or_the_flags_do(policy, name) -> None:
    assert config_from_dict({"policy": policy}).policy.trainer_name() == name


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"trainer_backend": "torhc"}, "no trainer backend 'torhc' (did you mean 'torch'?)"),
        ({"trainer_backend": "jax"}, "policy.jax_cfg.enabled is false"),
        ({"trainer_backend": "torch", **JAX_ON}, "policy.dtensor_cfg.enabled is false"),
        ({"trainer_backend": "torch", "trainer_options": {"a": 1}}, "reads policy.dtensor_cfg"),
    ],
)
def test_a_wrong_backend_is_a_config_error_naming_the_fix(policy, message) -> None:
    with pytest.raises(ConfigError, match=r"policy\.trainer_(backend|options)") as e:
        config_from_dict({"policy": policy})
    assert message in str(e.value)


def test_each_backend_maps_the_sections_to_its_ranks_config() -> None:
    cfg = config_from_dict({"policy": {"model_name": "m"}, "grpo": {"seed": 5}})
    torch = TRAINER_BACKENDS.get("torch").config(
        cfg.policy, cfg.loss_fn, seed=5, max_steps=3, teachers=None, options={}
    )
    assert (torch["model_name"], torch["seed"], torch["scheduler"]["total_steps"]) == ("m", 5, 3)
    jax_cfg = config_from_dict({"policy": {"model_name": "m", **JAX_ON}})
    jax = TRAINER_BACKENDS.get("jax").config(jax_cfg.policy, jax_cfg.loss_fn, seed=5, max_steps=3)
    assert (jax["model_name"], jax["seed"]) == ("m", 5)
    with pytest.raises(ValueError, match="teachers run on the torch trainer"):
        TRAINER_BACKENDS.get("jax").config(
            jax_cfg.policy, None, seed=5, max_steps=3, teachers=[object()]
        )
