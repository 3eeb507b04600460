"""The RL math, written once for numpy, torch and JAX arrays.

Every function takes arrays of one framework and returns arrays of the same type (torch and
JAX results are differentiable); the framework is detected from the inputs' types, so importing
this package imports neither torch nor JAX. Formulas and papers are in each module's docstring
and in ``docs/algorithms.md``.

Shapes: ``B`` sequences of ``T`` tokens; ``P`` groups (prompts) of ``G`` samples.

* Advantages (:mod:`.advantages`): ``compute_advantages(rewards [P, G], valid [P, G],
  estimator="grpo"|"dr_grpo"|"rloo"|"reinforce_plus_plus"|"gdpo", clip=None, **options)
  -> [P, G]``.
* Policy losses (:mod:`.losses`): ``clipped_pg_loss`` (= ``grpo_loss``; PPO/GRPO/DAPO/GSPO,
  dual clip), ``cispo_loss``: ``(logprobs [B, T], advantages [B, T] | [B], mask [B, T], *,
  prev_logprobs, gen_logprobs, ref_logprobs, ...) -> (loss, metrics)``; ``PolicyLoss``
  (alias ``ClippedPGLoss``) binds one into the trainer's ``LossFn`` protocol, and
  ``PolicyLoss.from_config(cfg.loss_fn)`` builds it from the config; ``loss_from_config``
  builds the loss of any ``loss_fn.type``.
* KL (:mod:`.kl`): ``kl_estimate(logprobs, ref_logprobs, "k1"|"k2"|"k3") -> [B, T]``.
* Importance sampling (:mod:`.importance`): ``importance_weights(prev, gen, mask,
  kind="tis"|"icepop"|"seq-mask-tis", ratio_max, ratio_min) -> (w [B, T], metrics)``.
* Aggregation (:mod:`.aggregate`): token-level or sequence-level, with global normalisers.
* Preference (:mod:`.preference`): ``preference_loss(variant, chosen_logps [B], ...)`` for DPO,
  cDPO, IPO, DPOP, R-DPO, SimPO, ORPO (+ SFT blend); ``bradley_terry_loss``; bound to a
  config's options: ``PreferenceLoss``, ``BradleyTerryLoss``; ``PreferencePairsLoss``: the
  trainer's ``LossFn`` over adjacent (chosen, rejected) rows (the DPO driver's);
  ``BradleyTerryPairsLoss``: the same for a reward model's row scores (the RM driver's).
* Supervised (:mod:`.supervised`): ``masked_nll``, ``MaskedNLLLoss``, ``topk_forward_kl``,
  ``topk_reverse_kl``, ``DistillationLoss``, ``OnPolicyDistillationLoss`` (its ``LossFn``).
* On-policy distillation advantage (``adv_estimator: opd``; :mod:`.advantages.opd`):
  ``opd_token_advantages(student_lp [B, T], teacher_lps [N, B, T], weights, seq_adv) -> [B, T]``;
  ``OPDPolicyLoss`` (:mod:`.losses.opd`): a policy loss on them (its ``LossFn``).
* Cross-tokenizer teachers (:mod:`.cross_tokenizer`): ``align_positions``, ``prefix_token_map``,
  ``project_to_student``, ``combine_teachers`` (``weighted_sum`` | ``average_logits`` |
  ``select_teacher``).
* Shaping (:mod:`.shaping`): ``overlong_penalty``, ``overlong_filter``,
  ``dynamic_sampling_keep``.
"""

from dockyard.core.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    dr_grpo_advantages,
    gdpo_advantages,
    grpo_advantages,
    opd_advantages,
    opd_token_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from dockyard.core.rl.aggregate import AGG_MODES, aggregate
from dockyard.core.rl.cross_tokenizer import (
    align_positions,
    combine_teachers,
    prefix_token_map,
    project_to_student,
)
from dockyard.core.rl.importance import IS_TYPES, importance_weights, logprob_mismatch
from dockyard.core.rl.kl import kl_estimate
from dockyard.core.rl.losses import (
    POLICY_LOSSES,
    ClippedPGLoss,
    PolicyLoss,
    cispo_loss,
    clipped_pg_loss,
    grpo_loss,
    loss_from_config,
)
from dockyard.core.rl.losses.opd import OPDPolicyLoss
from dockyard.core.rl.preference import (
    PREFERENCE_LOSSES,
    BradleyTerryLoss,
    BradleyTerryPairsLoss,
    PreferenceLoss,
    PreferenceOptions,
    PreferencePairsLoss,
    bradley_terry_loss,
    preference_loss,
)
from dockyard.core.rl.shaping import dynamic_sampling_keep, overlong_filter, overlong_penalty
from dockyard.core.rl.supervised import (
    DistillationLoss,
    MaskedNLLLoss,
    OnPolicyDistillationLoss,
    masked_nll,
    topk_forward_kl,
    topk_reverse_kl,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "IS_TYPES",
    "POLICY_LOSSES",
    "PREFERENCE_LOSSES",
    "BradleyTerryLoss",
    "BradleyTerryPairsLoss",
    "ClippedPGLoss",
    "DistillationLoss",
    "MaskedNLLLoss",
    "OPDPolicyLoss",
    "OnPolicyDistillationLoss",
    "PolicyLoss",
    "PreferenceLoss",
    "PreferenceOptions",
    "PreferencePairsLoss",
    "aggregate",
    "align_positions",
    "bradley_terry_loss",
    "cispo_loss",
    "clipped_pg_loss",
    "combine_teachers",
    "compute_advantages",
    "dr_grpo_advantages",
    "dynamic_sampling_keep",
    "gdpo_advantages",
    "grpo_advantages",
    "grpo_loss",
    "importance_weights",
    "kl_estimate",
    "logprob_mismatch",
    "loss_from_config",
    "masked_nll",
    "opd_advantages",
    "opd_token_advantages",
    "overlong_filter",
    "overlong_penalty",
    "preference_loss",
    "prefix_token_map",
    "project_to_student",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "topk_forward_kl",
    "topk_reverse_kl",
]
