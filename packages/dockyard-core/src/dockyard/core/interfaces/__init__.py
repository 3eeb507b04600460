"""The few small interfaces the training loop calls. One module per role:

* :class:`PolicyWorker` (``policy``): logprobs, train steps, checkpoints, weight export; a
  :class:`TrainerBackend` names a worker class and its config mapping (``TRAINER_BACKENDS``).
* :class:`GenerationEngine` (``generation``): sampling with logprobs, pause/resume, weight updates.
* :class:`Environment` (``environment``): single-turn scoring and multi-turn steps.
* :class:`WeightSender` / :class:`WeightReceiver` (``transport``): trainer -> engine weights.
"""

from dockyard.core.interfaces.environment import Environment, StepResult
from dockyard.core.interfaces.generation import GenerationEngine, GenerationResult, SamplingParams
from dockyard.core.interfaces.policy import (
    TRAINER_BACKENDS,
    LossFn,
    PolicyWorker,
    TrainerBackend,
    TrainMetrics,
)
from dockyard.core.interfaces.transport import (
    WeightBucket,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightSyncTimeout,
)

__all__ = [
    "TRAINER_BACKENDS",
    "Environment",
    "GenerationEngine",
    "GenerationResult",
    "LossFn",
    "PolicyWorker",
    "SamplingParams",
    "StepResult",
    "TrainMetrics",
    "TrainerBackend",
    "WeightBucket",
    "WeightReceiver",
    "WeightSender",
    "WeightSyncError",
    "WeightSyncTimeout",
]
