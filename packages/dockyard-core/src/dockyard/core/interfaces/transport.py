"""Weight transports: the trainer's sender and the engine's receiver.

Weights travel as buckets of full tensors keyed by Hugging Face parameter name, tagged with the
policy version. Every wait has a timeout: a dead peer raises :class:`WeightSyncTimeout` naming
the peer and the transport, never hangs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


class WeightSyncError(RuntimeError):
    """A weight sync failed (checksum mismatch, peer error...)."""


class WeightSyncTimeout(WeightSyncError, TimeoutError):
    """A peer did not answer within the transport's timeout."""


@dataclass
class WeightBucket:
    """One bucket of a versioned weight update.

    Attributes:
        version: the policy version these weights belong to.
        index: position of this bucket in the update (0-based).
        last: True on the final bucket of the update.
        tensors: HF parameter name -> array (any shape; dtype preserved).
    """

    version: int
    index: int
    last: bool
    tensors: dict[str, np.ndarray]


class WeightSender(ABC):
    """Trainer side."""

    @abstractmethod
    def send(self, buckets: Iterable[dict[str, np.ndarray]], version: int) -> None:
        """Send one complete, versioned update (blocks until delivered or times out)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and shared segments."""


class WeightReceiver(ABC):
    """Engine side."""

    @abstractmethod
    def receive(self) -> Iterator[WeightBucket]:
        """Yield the buckets of the next update in order; the last has ``last=True``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and shared segments."""
