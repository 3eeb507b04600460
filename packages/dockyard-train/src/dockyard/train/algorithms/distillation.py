"""On-policy distillation, the loss side: its pre-flight (light: ``dockyard config check`` runs
it without Ray).

The GRPO loop (:mod:`.grpo`) trains the distillation loss as it trains a policy gradient: it
picks the loss by ``loss_fn.type`` and, for this one, adds the held-out KL to its validation
(:func:`.validation.validate_distillation`); ``dockyard distill`` (:mod:`.distill`) is that loop
after these checks. Nothing here imports the loop.

On-policy distillation: the student samples, a frozen teacher grades every sampled token.

The GRPO loop (:mod:`.grpo`) with the distillation loss in place of the policy gradient: the
student (``policy.model_name``) generates through the inference fleet on an environment's
prompts, exactly as GRPO does (same collector, buffer, weight push, asynchrony bound,
checkpoints, fault handling); the environment still scores every sample — the task reward, logged
as GRPO logs it, is the score distillation should raise — but the reward trains nothing. The
teacher (``loss_fn.teacher_model_name``: a causal LM with the student's vocabulary) lives on the
torch trainer beside the student, frozen; in each train step, per micro-batch, the trainer runs
it on the student's tokens and hands the loss the student's logits with the teacher's top-k
(nothing ``[B, T, V]`` crosses a process). With y ~ π_student(·|x) and the response tokens t:

    forward (kl_type: forward):  KL_t = Σ_{i ∈ topk_T} p_T,i (log p_T,i − log q_S,i)
    reverse (kl_type: reverse):  KL_t = Σ_{i ∈ topk_T} q̃_S,i (log q̃_S,i − log p̃_T,i)
    L = Σ_t m_t KL_t / N_tok                 p_T = softmax(z_T,topk / τ), q_S = softmax(z_S / τ)

(:mod:`dockyard.core.rl.supervised`; Agarwal et al. 2024, "On-Policy Distillation of Language
Models", arXiv:2306.13649, with the teacher's top-k as in NeMo-RL.)

    for step in range(start, max_num_steps):           # grpo.train's loop, unchanged
        groups  = buffer.wait_sample(P, step)          # the student's samples, scored
        batch   = build_batch(groups)                  # loss_mask: the sampled tokens
        metrics = trainer.train_step(batch, OnPolicyDistillationLoss)   # teacher top-k inside
        push_weights(step + 1); log(step + 1)          # + validation (below)

Validation (``grpo.val_at_start`` — before the first step, not beside it: the KL needs the start
weights — ``val_period``, ``val_at_end``): the student samples ``grpo.val_samples_per_prompt``
responses per held-out task at ``grpo.val_temperature``; ``val/pass_rate`` (the task score, as
GRPO's) and ``val/distill_kl``, the loss on those samples (the student's KL to the teacher on
held-out prompts, token mean), with ``val/distill_tokens``.

Several teachers (``loss_fn.teachers``: ``{model_name, weight}`` each, any tokenizer): the
trainer aligns each to the student's tokens through the text, projects it onto the student's
vocabulary and combines them (``loss_fn.teacher_combination``: ``weighted_sum``,
``average_logits``, ``select_teacher``) into one target per token (:mod:`dockyard.core.rl.
cross_tokenizer`, :mod:`dockyard.torch.teachers`); the loss is the same top-k KL, over the
tokens some teacher is aligned at (``distill_aligned``: their fraction).

On-policy distillation as GRPO's *advantage* (``grpo.adv_estimator: opd``,
:mod:`dockyard.core.rl.advantages.opd`) runs in the GRPO driver (``dockyard train``), not here;
:func:`opd_problems` holds its pre-flight.

The teachers are trainer-side, so distillation trains on the torch worker; the JAX trainer
refuses it (:func:`distill_problems`).
"""

from __future__ import annotations

import json
from pathlib import Path

from dockyard.core.config import DistillationLossConfig, MasterConfig
from dockyard.core.config.grpo import OPDAdvConfig
from dockyard.core.config.loss import PG_LOSS_TYPES, is_policy_gradient
from dockyard.train.models import resolve_model


def distill_problems(cfg: MasterConfig, models: bool = True) -> list[str]:
    """What the distillation driver cannot run, found before anything starts: the JAX trainer
    (the teachers live on the torch worker), the OPD advantage (``dockyard train`` trains it);
    with ``models`` (not when joining a cluster, whose workers hold the models), a teacher
    folder that is missing, ``teacher_model_name``'s vocabulary differing from the student's
    (its top-k ids index the student's logits: ``loss_fn.teachers`` aligns other tokenizers),
    a ``topk`` above the vocabulary."""
    problems = []
    if cfg.policy.jax_cfg.enabled:
        problems.append(
            "policy.jax_cfg.enabled: dockyard distill runs its teachers on the torch trainer; "
            "set policy.jax_cfg.enabled: false (the torch worker, policy.dtensor_cfg)"
        )
    if cfg.grpo.adv_estimator.name == "opd":
        problems.append(
            "grpo.adv_estimator.name: opd is on-policy distillation as GRPO's advantage, which "
            "`dockyard train` runs with a policy-gradient loss_fn; dockyard distill trains the "
            "KL loss: remove grpo.adv_estimator (or run the OPD config with dockyard train)"
        )
    loss = cfg.loss_fn
    if not models or not isinstance(loss, DistillationLossConfig):  # (asked for distillation)
        return problems
    student, more = resolve_model("policy.model_name", cfg.policy.model_name)
    s_vocab = None if student is None else _vocab_size(student)
    if loss.teachers is not None:
        for i, t in enumerate(loss.teachers):
            folder, more = resolve_model(f"loss_fn.teachers.{i}.model_name", t.model_name)
            problems += more
        if s_vocab is not None and loss.topk > s_vocab:
            problems.append(
                f"loss_fn.topk: {loss.topk} exceeds the student's vocabulary "
                f"({s_vocab}; several teachers' target is on the student's tokens): lower it"
            )
        return problems
    key = "loss_fn.teacher_model_name"
    if loss.teacher_model_name is None:  # (the schema asks for it or teachers)
        return [*problems, f"{key}: set it (or loss_fn.teachers)"]
    folder, more = resolve_model(key, loss.teacher_model_name)
    problems += more
    if folder is None:
        return problems
    t_vocab = _vocab_size(folder)
    if t_vocab is None:
        return [*problems, f"{key}: {str(folder)!r} has no config.json with a vocab_size"]
    if s_vocab is not None and t_vocab != s_vocab:
        problems.append(
            f"{key}: the teacher's vocabulary ({t_vocab} ids, {folder}) differs from the "
            f"student's ({s_vocab}, policy.model_name): top-k distillation from one teacher "
            "needs one tokenizer; pick a teacher of the student's family, or list it in "
            "loss_fn.teachers (aligned to the student's tokens through the text)"
        )
    if loss.topk > t_vocab:
        problems.append(
            f"loss_fn.topk: {loss.topk} exceeds the teacher's vocabulary ({t_vocab}): lower it"
        )
    return problems


def opd_problems(cfg: MasterConfig, models: bool = True) -> list[str]:
    """What ``grpo.adv_estimator: opd`` cannot run with (:mod:`dockyard.core.rl.advantages.opd`;
    the GRPO driver asks, through :func:`.drivers.loss_problems`): the JAX trainer (the
    teachers live on the torch worker), a ``loss_fn`` that is not a policy gradient; with
    ``models`` (``dockyard train``, not ``config check``), a missing teacher folder."""
    problems = []
    if cfg.policy.jax_cfg.enabled:
        problems.append(
            "policy.jax_cfg.enabled: grpo.adv_estimator opd scores tokens with teachers on the "
            "torch trainer; set policy.jax_cfg.enabled: false (or use another adv_estimator)"
        )
    if not is_policy_gradient(cfg.loss_fn):
        problems.append(
            f"loss_fn.type: {cfg.loss_fn.type!r} with grpo.adv_estimator opd: the OPD "
            f"advantage trains a policy-gradient loss ({' or '.join(PG_LOSS_TYPES)}) with "
            "`dockyard train`; for the KL loss use loss_fn.type: distillation without "
            "grpo.adv_estimator opd, with `dockyard distill`"
        )
    adv = cfg.grpo.adv_estimator
    for i, t in enumerate(adv.teachers if models and isinstance(adv, OPDAdvConfig) else []):
        problems += resolve_model(f"grpo.adv_estimator.teachers.{i}.model_name", t.model_name)[1]
    return problems


def _vocab_size(folder: Path) -> int | None:
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    size = text.get("vocab_size")
    return size if isinstance(size, int) else None
