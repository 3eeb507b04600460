"""What the GRPO driver cannot run, found before anything starts (called from the pre-flight).

``MasterConfig`` is shared by every driver, so it accepts each ``loss_fn.type``; the GRPO loop
trains a policy-gradient loss (``clipped_pg``, ``cispo``) on advantages and nothing else. A
preference (``dpo`` ... ``orpo``), ``nll``, ``distillation`` or ``bradley_terry`` loss needs its
own driver: SFT has ``dockyard sft``; DPO, reward-model and distillation drivers are still to come.
Each check returns one line per problem, starting with the dotted key to change.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config.loss import PG_LOSS_TYPES

OTHER_DRIVERS = {
    "nll": "the SFT driver (dockyard sft)",
    "distillation": "a distillation driver, which dockyard does not have yet",
    "bradley_terry": "a reward-model driver, which dockyard does not have yet",
}


def check_loss_for_grpo(cfg: Any) -> list[str]:
    """``loss_fn.type`` must be a policy-gradient loss (see the module docstring)."""
    kind = cfg.loss_fn.type
    if kind in PG_LOSS_TYPES:
        return []
    other = OTHER_DRIVERS.get(kind, "a preference (DPO) driver, which dockyard does not have yet")
    return [
        f"loss_fn.type: {kind!r} is not a policy-gradient loss, and the GRPO driver trains only "
        f"{' or '.join(map(repr, PG_LOSS_TYPES))}; {kind!r} needs {other}"
    ]
