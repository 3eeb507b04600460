"""The policy worker: what a trainer backend (torch FSDP2, JAX NNX) offers the loop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.registry import Registry

TrainMetrics = dict[str, float]


class LossFn(Protocol):
    """A loss from ``dockyard.core`` applied by a backend to its own arrays.

    Called once per micro-batch with backend arrays (torch tensors / jax arrays):
    ``logprobs: [b, T]`` current-policy logprobs of the batch tokens and ``batch``: the
    micro-batch's fields as backend arrays, plus ``num_loss_tokens`` (the *global* count, across
    micro-batches and ranks, that token-level losses divide by). Returns the scalar loss and
    metrics.

    Keys the policy losses of ``dockyard.core.rl`` read (``PolicyLoss``, ``MaskedNLLLoss``):
    ``advantages [b, T] or [b]``, ``loss_mask [b, T] bool``, optional ``prev_logprobs``,
    ``gen_logprobs``, ``ref_logprobs`` (each ``[b, T]``), ``num_loss_tokens`` and
    ``num_sequences`` (global counts, 0-d). Metrics are 0-d arrays, means over this
    micro-batch's loss tokens (``num_tokens`` gives the weight for averaging across
    micro-batches).

    A loss that couples rows sets ``rows_per_group = k`` (a class attribute; absent: 1): the
    trainer keeps every run of k adjacent rows (rows ``k·i .. k·i + k − 1``) in one micro-batch
    on one rank, in order. ``PreferencePairsLoss`` sets 2: a pair's chosen and rejected rows.
    """

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]: ...


class PolicyWorker(ABC):
    """One rank (or a single process) of a trainer backend.

    Arrays in and out are numpy; logprobs are ``[B, T] float32`` aligned with ``input_ids``:
    ``logprobs[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` (temperature-scaled as in
    generation), 0 at ``t = 0`` and where ``attention_mask`` is False.
    """

    @abstractmethod
    def get_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` current-policy logprobs of ``batch.input_ids``."""

    @abstractmethod
    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` logprobs under the frozen reference policy."""

    @abstractmethod
    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k logits for distillation: ``(values [B, T, k] float32, indices [B, T, k] int64)``."""

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32``: the entropy (nats) of the distribution each token was drawn
        from, temperature-scaled like the logprobs and aligned like them (0 at t = 0 and on
        padding). Optional: the rollout log asks for it (``logger.rollouts.entropy``)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not compute token entropies: set "
            "logger.rollouts.entropy=false"
        )

    @abstractmethod
    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """One optimizer step over ``batch`` (micro-batched with gradient accumulation)."""

    @abstractmethod
    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        """Save model, optimizer, scheduler, RNG and step (sharded, resharding-safe)."""

    @abstractmethod
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save_checkpoint` wrote; returns its ``extra_state``."""

    @abstractmethod
    def export_weights(self, bucket_bytes: int) -> Iterator[dict[str, np.ndarray]]:
        """Full tensors by Hugging Face parameter name, in buckets of at most ``bucket_bytes``
        (a single tensor larger than that forms its own bucket)."""

    @property
    @abstractmethod
    def step(self) -> int:
        """Number of optimizer steps taken (the policy version it has produced)."""


@dataclass(frozen=True)
class TrainerBackend:
    """A trainer backend as the runtime starts it (a ``policy.trainer_backend`` name in
    :data:`TRAINER_BACKENDS`).

    ``worker``: its :class:`PolicyWorker` class as ``"module:Class"``, imported in each rank's
    process only (the driver never imports torch or JAX for it); built as
    ``Class(config, rank=..., world_size=...)`` like the built-ins. ``config``: the mapping from
    the run's sections to what each rank receives — ``config(policy, loss_fn, *, seed,
    max_steps, teachers)`` returns a plain dict (``policy``: the ``policy`` section; ``loss_fn``:
    the ``loss_fn`` section; ``teachers``: an on-policy-distillation advantage's teachers, or
    None); it raises ValueError naming the key for a setting the backend cannot honour."""

    worker: str
    config: Callable[..., dict[str, Any]]


TRAINER_BACKENDS: Registry[TrainerBackend] = Registry("trainer backend", "dockyard.trainers")
"""Trainer backends by name: dockyard-torch's ``torch`` and dockyard-jax's ``jax`` are entry
points of the group ``dockyard.trainers`` (each installs with its package), as a third party's
are."""
