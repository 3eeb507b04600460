"""Which driver trains which ``loss_fn.type``, checked before anything starts (the pre-flight).

``MasterConfig`` is shared by every driver, so it accepts each ``loss_fn.type``; each driver
trains its own and refuses the others with the command that does train them:

===================================  =================================  ===================
``loss_fn.type``                     driver                             command
===================================  =================================  ===================
``clipped_pg``, ``cispo``            GRPO (:mod:`.grpo`)                ``dockyard train``
``nll``                              SFT (:mod:`.sft`)                  ``dockyard sft``
``dpo`` ... ``orpo``                 DPO (:mod:`.dpo`)                  ``dockyard dpo``
``bradley_terry``                    reward model (:mod:`.rm`)          ``dockyard rm``
``distillation``                     distillation (:mod:`.distill`)     ``dockyard distill``
===================================  =================================  ===================

Online DPO (:mod:`.online_dpo`, ``dockyard online-dpo``) trains the preference losses too, on
pairs its judge ranks: it checks ``loss_fn.type`` as the DPO driver does.

A loss another package registers (``dockyard.core.config.loss``) goes to the driver of its
family: a policy gradient (entry-point group ``dockyard.losses``) to ``dockyard train``, a
preference loss (``dockyard.preference_losses``) to ``dockyard dpo`` (:func:`loss_driver`).

``dockyard config check`` knows no driver: it accepts a loss that some driver trains. A new
driver adds its loss types to :data:`LOSS_DRIVERS`. Each problem is one line starting with the
dotted key to change.
"""

from __future__ import annotations

from dockyard.core.config import MasterConfig
from dockyard.core.config.loss import PG_LOSS_TYPES, PREFERENCE_LOSS_TYPES
from dockyard.core.rl import POLICY_LOSSES, PREFERENCE_LOSSES
from dockyard.train.algorithms.distillation import opd_problems

LOSS_DRIVERS: dict[str, str] = {
    **dict.fromkeys(PG_LOSS_TYPES, "train"),
    "nll": "sft",
    **dict.fromkeys(PREFERENCE_LOSS_TYPES, "dpo"),
    "bradley_terry": "rm",
    "distillation": "distill",
}
"""The built-in ``loss_fn.type`` -> the ``dockyard`` command whose driver trains it."""


def loss_driver(kind: str) -> str | None:
    """The ``dockyard`` command whose driver trains ``loss_fn.type`` ``kind``: a built-in's
    (:data:`LOSS_DRIVERS`), a registered loss's family's, else None."""
    if kind in LOSS_DRIVERS:
        return LOSS_DRIVERS[kind]
    if kind in PREFERENCE_LOSSES:
        return "dpo"
    if kind in POLICY_LOSSES:
        return "train"
    return None


DRIVER_NAMES = {
    "train": "the GRPO driver (dockyard train)",
    "sft": "the SFT driver (dockyard sft)",
    "dpo": "the DPO driver (dockyard dpo)",
    "rm": "the reward-model driver (dockyard rm)",
    "distill": "the distillation driver (dockyard distill)",
}
_KINDS = {
    "train": "a policy-gradient loss",
    "sft": "a supervised (NLL) loss",
    "dpo": "a preference loss",
    "rm": "a reward-model loss",
    "distill": "a distillation loss",
}
_NOT_YET: dict[str, str] = {}


def loss_problems(cfg: MasterConfig, command: str | None = None) -> list[str]:
    """``loss_fn.type`` is trained by ``command`` (``train``, ``sft``, ``dpo``, ``rm``); with None
    (or another command: ``config check``, ``quickstart``), by some driver."""
    opd = cfg.grpo.adv_estimator.name == "opd" and command != "distill"  # .distillation's
    if opd and (problems := opd_problems(cfg, models=command == "train")):
        return problems
    kind = cfg.loss_fn.type
    owner = loss_driver(kind)
    if owner is None:
        what = _NOT_YET.get(kind, "a driver")
        return [f"loss_fn.type: {kind!r} needs {what}, which dockyard does not have yet"]
    if command not in DRIVER_NAMES or owner == command:
        return []
    mine = [repr(t) for t, c in LOSS_DRIVERS.items() if c == command]  # the built-ins
    trains = " or ".join(mine) if len(mine) < 3 else f"one of {', '.join(mine)}"
    return [
        f"loss_fn.type: {kind!r} is {_KINDS[owner]}, which {DRIVER_NAMES[command]} does not "
        f"train (it trains {trains}): set loss_fn.type to one of those, or run this config "
        f"with `dockyard {owner} --config FILE`"
    ]


def check_loss_for_grpo(cfg: MasterConfig) -> list[str]:
    """The GRPO driver can train ``loss_fn.type`` (what ``train()`` itself checks first)."""
    return loss_problems(cfg, "train")
