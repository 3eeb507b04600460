"""The run's config split into each component's own, once, by the driver.

A driver (:mod:`~dockyard.train.algorithms.grpo`, the preference drivers, the evaluation) holds
the whole ``MasterConfig``; everything it starts takes only its own typed part:

* :func:`stack_config`: the :class:`~dockyard.train.runtime.stack.StackConfig` — the cluster
  section, the trainer fleet (the backend's worker and its config, :func:`trainer_fleet_config`),
  the engines (dockyard-serve's :class:`~dockyard.serve.config.EngineConfig`), the weight
  transport, the sandbox and judge fleets, the replay buffer's age bound;
* :func:`collector_config`: the collector actor's
  :class:`~dockyard.train.runtime.collector_config.CollectorConfig`;
* :func:`prompt_config` (:func:`prompt_renderer`): the renderer's
  :class:`~dockyard.train.prompts.PromptConfig`;
* :func:`batch_options`: the batch builder's :class:`~dockyard.train.batching.BatchOptions`.

The backends' own mappings (a trainer backend's ``config``, ``EngineConfig.from_sections``)
take the sections they map and the loop's values, and are called here: no module below the
drivers reads the run's config (``tests/workspace/test_config_split.py``).
"""

from __future__ import annotations

import os
from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.core.interfaces import TRAINER_BACKENDS, TrainerBackend
from dockyard.serve.config import EngineConfig
from dockyard.train.batching import BatchOptions
from dockyard.train.environments import needs_judge, needs_sandbox
from dockyard.train.prompts import PromptConfig, PromptRenderer
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.stack import (
    JudgeFleetConfig,
    SandboxFleetConfig,
    StackConfig,
    TrainerFleetConfig,
)

INSTALL = {  # the built-in backends' distributions, for a run that names one not installed
    "torch": 'pip install "dockyard-train[torch]"',
    "jax": 'pip install "dockyard-train[jax]"',
}


def needs_reference(cfg: MasterConfig) -> bool:
    """Whether the trainer keeps π_ref (``loss_fn.reference_policy_kl_penalty`` β > 0)."""
    return float(getattr(cfg.loss_fn, "reference_policy_kl_penalty", 0.0) or 0.0) > 0.0


def trainer_backend(name: str) -> TrainerBackend:
    """The registered trainer backend ``name`` (``policy.trainer_backend``); a built-in whose
    package is not installed is an ImportError naming the install command."""
    try:
        return TRAINER_BACKENDS.get(name)
    except KeyError:
        if name in INSTALL:
            raise ImportError(
                f"the {name} trainer backend needs dockyard-{name}: {INSTALL[name]}"
            ) from None
        raise


def worker_config(cfg: MasterConfig, backend: TrainerBackend | None = None) -> dict[str, Any]:
    """What each rank of ``backend`` (default: the run's) receives: the backend's mapping of
    ``policy`` and ``loss_fn``, with the loop's seed and length and an OPD advantage's teachers."""
    p, g = cfg.policy, cfg.grpo
    backend = backend or trainer_backend(p.trainer_name())
    est = g.adv_estimator
    return backend.config(
        p,
        cfg.loss_fn,
        seed=g.seed,
        max_steps=g.max_num_steps,
        # the OPD advantage's teachers
        teachers=getattr(est, "teachers", None) if est.name == "opd" else None,
        options=p.trainer_options,
    )


def torch_worker_config(cfg: MasterConfig) -> dict[str, Any]:
    """:func:`worker_config` of the torch backend (the drivers that train on it only: SFT, DPO,
    the reward model)."""
    return worker_config(cfg, trainer_backend("torch"))


def trainer_fleet_config(cfg: MasterConfig, **worker: Any) -> TrainerFleetConfig:
    """The trainer fleet of the run's backend (``policy.trainer_backend``, else from
    ``dtensor_cfg`` / ``jax_cfg``); ``worker``: keys of the backend's config the driver sets
    itself (a preference driver's doubled micro-batch and its reference flag)."""
    backend = trainer_backend(cfg.policy.trainer_name())
    return TrainerFleetConfig(
        worker=backend.worker,
        worker_config={**worker_config(cfg, backend), **worker},
        ranks=cfg.cluster.trainer_ranks,
        cpus=cfg.cluster.trainer_cpus,
    )


def stack_config(
    cfg: MasterConfig,
    *,
    trainer: TrainerFleetConfig | bool | None = True,
    environment: bool = True,
) -> StackConfig:
    """The :class:`StackConfig` of ``cfg``. ``trainer``: True — the backend's fleet
    (:func:`trainer_fleet_config`), a fleet config of the driver's own, or None (no trainer:
    an evaluation); ``environment`` False: no environment, sandbox, judge or replay buffer
    (the preference drivers)."""
    env_name = cfg.env_for_data() if environment else None
    if environment and env_name is None:
        raise ValueError("no environment: add an env.<name> entry (and data.env_name if several)")
    return StackConfig(
        cluster=cfg.cluster,
        trainer=trainer_fleet_config(cfg) if trainer is True else trainer or None,
        engines=EngineConfig.from_sections(
            cfg.policy,
            seed=cfg.grpo.seed,
            gpus_per_node=cfg.cluster.gpus_per_node,
            model_path=cfg.policy.model_name,
            version=0,
        ),
        weight_transport=cfg.data_plane.weight_transport,
        overlap=cfg.grpo.async_grpo.enabled,
        env_name=env_name,
        sandbox=_sandbox_fleet(cfg, env_name),
        judge=_judge_fleet(cfg, env_name),
        buffer_age_bound=cfg.grpo.async_grpo.age_bound() if environment else None,
    )


def _sandbox_fleet(cfg: MasterConfig, env_name: str | None) -> SandboxFleetConfig | None:
    """The sandbox services to start: when the environment needs one and
    ``env.<name>.sandbox_urls`` names none."""
    if env_name is None:
        return None
    env_cfg, c = cfg.env[env_name], cfg.cluster
    if not needs_sandbox(env_name, env_cfg) or env_cfg.sandbox_urls:
        return None
    return SandboxFleetConfig(
        services=c.sandbox_services,
        workers=c.sandbox_workers or min(16, 2 * (os.cpu_count() or 1)),
        repo_roots=c.sandbox_repo_roots,
        git_schemes=c.sandbox_git_schemes,
    )


def _judge_fleet(cfg: MasterConfig, env_name: str | None) -> JudgeFleetConfig | None:
    """The judge fleet when the environment grades with the LLM judge (``needs_judge``,
    ``use_judge`` not off) on backend ``engine``; else none (backend ``openai`` needs none)."""
    if env_name is None:
        return None
    env_cfg, j = cfg.env[env_name], cfg.judge
    if not needs_judge(env_name, env_cfg) or not env_cfg.options.get("use_judge", True):
        return None
    if j.backend != "engine":
        return None
    if not j.model_name:
        raise ValueError(
            f"env.{env_name} grades with the LLM judge: set judge.model_name (backend "
            "'engine') or judge.backend: openai with judge.base_url; or env."
            f"{env_name}.options.use_judge: false to grade by the deterministic checks"
        )
    return JudgeFleetConfig(model_name=j.model_name, num_engines=j.num_engines, seed=cfg.grpo.seed)


def collector_config(cfg: MasterConfig, prompts_per_step: int, age_bound: int) -> CollectorConfig:
    """The collector actor's own config; the driver passes the two loop values it read itself
    (P, A)."""
    name = cfg.env_for_data()
    if name is None:
        raise ValueError("no environment scores the data: set data.env_name or one env entry")
    env = cfg.env[name]
    graded = needs_judge(name, env) and env.options.get("use_judge", True)
    g = cfg.grpo
    return CollectorConfig(
        env_name=name,
        env=env,
        judge=cfg.judge if graded else None,
        prompts=prompt_config(cfg),
        generation=cfg.policy.generation,
        samples_per_prompt=g.num_generations_per_prompt,
        seed=g.seed,
        shuffle=cfg.data.shuffle,
        max_num_epochs=g.max_num_epochs,
        max_rollout_turns=g.max_rollout_turns,
        max_groups_in_flight=max(prompts_per_step * (age_bound + 1), 4),
    )


def prompt_config(cfg: MasterConfig) -> PromptConfig:
    """The prompt renderer's own config: ``policy.tokenizer``, ``data``'s prompt keys, and the
    longest prompt (``data.max_input_seq_length``, else the context less the new tokens)."""
    p, d = cfg.policy, cfg.data
    limit = d.max_input_seq_length or (p.max_total_sequence_length - p.generation.max_new_tokens)
    return PromptConfig(
        tokenizer=p.tokenizer.name or p.model_name,
        chat_template=p.tokenizer.chat_template,
        prompt_file=d.prompt_file,
        system_prompt_file=d.system_prompt_file,
        max_input_tokens=limit,
    )


def prompt_renderer(cfg: MasterConfig, tokenizer: Any) -> PromptRenderer:
    """A :class:`PromptRenderer` over ``tokenizer`` from :func:`prompt_config`."""
    return PromptRenderer.build(prompt_config(cfg), tokenizer)


def batch_options(cfg: MasterConfig) -> BatchOptions:
    """What the driver applies when it builds a batch: ``grpo``'s estimator, clip, overlong
    filtering and reward shaping (its length defaults to ``policy.generation.max_new_tokens``)."""
    g, rs = cfg.grpo, cfg.grpo.reward_shaping
    return BatchOptions(
        estimator=g.adv_estimator.name,
        estimator_options=g.adv_estimator.estimator_options(),
        advantage_clip=g.adv_estimator.advantage_clip,
        overlong_filtering=g.overlong_filtering,
        reward_shaping=rs.enabled,
        max_response_length=rs.max_response_length or cfg.policy.generation.max_new_tokens,
        overlong_buffer_length=rs.overlong_buffer_length,
        overlong_penalty=rs.overlong_buffer_penalty,
    )
