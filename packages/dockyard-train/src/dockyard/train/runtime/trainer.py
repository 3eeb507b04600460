"""The trainer fleet as one typed client: each call reaches every rank, the answer is rank 0's.

``Stack.trainer`` is a :class:`TrainerClient`. Its methods are the
:class:`~dockyard.core.interfaces.PolicyWorker` operations the drivers use, under the worker's
own names (so a driver reads the same against a local worker), plus the fleet's life cycle.
Every rank gets the same call — the same global batch; each data-parallel row trains its
share — and the client waits with :func:`gather_ranks`: a rank that dies raises
:class:`TrainerLost` as soon as Ray reports it (its peers would otherwise wait in a collective
until their timeout), any other error is raised as soon as it is known.

==========================  ==================================================================
``step()``                  optimizer steps taken (the policy version the trainer holds)
``get_logprobs(batch)``     ``[B, T] float32`` current-policy logprobs of ``batch.input_ids``
``get_reference_logprobs``  the same under the frozen reference policy
``get_topk_logits(b, k)``   ``(values [B, T, k] float32, indices [B, T, k] int64)``
``train_step(batch, loss)`` one optimizer step; the step's metrics
``hold(ref)``               the GRPO step's batch, held by every rank from an ObjectRef, then
                            ``fill_logprobs``, ``rollout_values``, ``train_held`` on it
``loss_metrics(b, loss)``   the loss's metrics over ``batch``, no step (held-out)
``save_checkpoint(path)``   the trainer's own sharded checkpoint (``load_checkpoint`` reads it)
``export_hf(path)``         a Hugging Face folder of the current weights
``restart()``               every rank again (a process group cannot lose a member)
==========================  ==================================================================

The weight push (:meth:`~dockyard.train.runtime.stack.Stack.push_weights`) talks to the ranks'
``send_weights`` itself, through :attr:`TrainerClient.actors`: it waits on an engine together
with the ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import LossFn, TrainMetrics
from dockyard.train.runtime.cluster import require_ray
from dockyard.train.runtime.hosts import PolicyHost
from dockyard.train.runtime.placement import Fleet, FleetSpec


class TrainerLost(RuntimeError):
    """A trainer rank died (``RayActorError``): its process group cannot go on without it.

    Attributes:
        rank: the rank found dead.
        engines: engines that were receiving weights from the fleet when it died (their
            weights are partial: the driver replaces them once the trainer is back).
    """

    def __init__(self, rank: int, cause: BaseException, engines: list[int] | None = None) -> None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(f"trainer rank {rank} died ({first.rstrip('.')})")
        self.rank = rank
        self.engines = list(engines or [])


class TrainerClient:
    """The trainer ranks of one run (see the module docstring).

    Args:
        fleet: the ranks' :class:`~dockyard.train.runtime.hosts.PolicyHost` actors, in rank
            order (:meth:`start` builds it).
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    @classmethod
    def start(
        cls,
        spec: FleetSpec,
        factory: str,
        config: dict[str, Any],
        *,
        cpus: str | None = None,
        threads: int | None = None,
    ) -> TrainerClient:
        """Start ``spec.size`` ranks, each building ``factory`` (``"module:callable"``) from
        ``config``; with several, they join one process group. Not waited for: :meth:`ready`.

        ``cpus``: the cores to bind the ranks to; ``threads``: each rank's compute threads
        (None: the host's count, :func:`~dockyard.train.runtime.hosts.fleet_threads`)."""
        world = spec.size
        ranks = {"world_size": world, "defer": world > 1, "cpus": cpus, "threads": threads}
        fleet = Fleet(spec, PolicyHost, lambda i: ((factory, config), {"rank": i, **ranks}))
        client = cls(fleet)
        client._join()
        return client

    def _join(self) -> None:
        """Several ranks: rank 0's node and a free port there; the ranks join concurrently
        (not waited for: ``step`` answers once all joined)."""
        if len(self) > 1:
            addr, port = require_ray().get(self.actors[0].address.remote())
            for a in self.actors:
                a.start.remote(addr, port)

    @property
    def actors(self) -> list[Any]:
        """The ranks' actor handles, in rank order (replaced by :meth:`restart`)."""
        return self.fleet.actors

    def __len__(self) -> int:
        return len(self.fleet)

    def ready(self) -> list[Any]:
        """ObjectRefs that answer once every rank has built its worker (to wait on together
        with the engines' start)."""
        return [a.step.remote() for a in self.actors]

    def restart(self) -> None:
        """Kill every rank and start the fleet again (fresh weights from the factory's config;
        the caller loads a checkpoint). Survivors are killed too: they would wait in a
        collective for the dead rank."""
        self.fleet.restart_all()
        self._join()
        gather_ranks(self.ready())

    def shutdown(self) -> None:
        self.fleet.shutdown()

    # ------------------------------------------------------------ the PolicyWorker operations
    def step(self) -> int:
        """Optimizer steps taken: the policy version the trainer holds."""
        return int(_rank0([a.step.remote() for a in self.actors]))

    def get_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` current-policy logprobs of ``batch.input_ids``."""
        return _rank0([a.get_logprobs.remote(batch) for a in self.actors])

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32`` logprobs under the frozen reference policy."""
        return _rank0([a.get_reference_logprobs.remote(batch) for a in self.actors])

    def get_topk_logits(self, batch: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(values [B, T, k] float32, indices [B, T, k] int64)``: top-k logits."""
        return _rank0([a.get_topk_logits.remote(batch, k) for a in self.actors])

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        """``[B, T] float32``: the entropy of each token's distribution (the rollout log's)."""
        return _rank0([a.get_token_entropy.remote(batch) for a in self.actors])

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """One optimizer step over ``batch`` (version ``s`` -> ``s + 1``); its metrics."""
        return _rank0([a.train_step.remote(batch, loss_fn) for a in self.actors])

    def loss_metrics(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        """``loss_fn``'s metrics over ``batch`` without a step (a held-out evaluation)."""
        return _rank0([a.loss_metrics.remote(batch, loss_fn) for a in self.actors])

    # ------------------------------------------------------- the held batch (the data plane)
    def hold(self, batch: Any) -> None:
        """Every rank takes ``batch`` — an ObjectRef (:mod:`.dataplane`): each rank resolves it
        from the object store, the driver never holds the arrays — for the calls below."""
        gather_ranks([a.hold.remote(batch) for a in self.actors])

    def fill_logprobs(self, kind: str) -> None:
        """Add π_prev's (``prev``) or π_ref's (``ref``) logprobs to the held batch."""
        gather_ranks([a.fill_logprobs.remote(kind) for a in self.actors])

    def rollout_values(self, logprobs: bool, entropy: bool) -> tuple[Any, float | None]:
        """The rollout log's trainer values of the held batch, as rank 0's ObjectRef (the
        driver passes it on unread; :meth:`PolicyHost.rollout_values`), and the entropy's mean
        over the loss tokens (None unless ``entropy``)."""
        pairs = [
            a.rollout_values.options(num_returns=2).remote(logprobs, entropy) for a in self.actors
        ]
        means = gather_ranks([mean for _, mean in pairs])
        return pairs[0][0], means[0]

    def train_held(self, loss_fn: LossFn, n_opt: int) -> TrainMetrics:
        """``n_opt`` optimizer steps on the held batch (one per consecutive slice of its rows),
        their metrics averaged; the ranks let the batch go."""
        return _rank0([a.train_held.remote(loss_fn, n_opt) for a in self.actors])

    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        """Model, optimizer, scheduler, RNG and step under ``path`` (every rank its shard)."""
        _rank0([a.save_checkpoint.remote(path, extra_state) for a in self.actors])

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save_checkpoint` wrote; returns its ``extra_state``."""
        return _rank0([a.load_checkpoint.remote(path) for a in self.actors])

    def export_hf(self, path: str) -> str:
        """Write a Hugging Face folder of the current weights to ``path``."""
        return _rank0([a.export_to.remote(path) for a in self.actors])

    def pids(self) -> list[int]:
        """Each rank's process id, in rank order."""
        return gather_ranks([a.pid.remote() for a in self.actors])


def _rank0(refs: list[Any]) -> Any:
    return gather_ranks(refs)[0]


def gather_ranks(refs: list[Any], also: Any = None) -> list[Any]:
    """The answers of one call on every trainer rank (``refs`` in rank order), waiting on them
    together with ``also`` (an engine's side of a weight sync). A rank that died raises
    :class:`TrainerLost` as soon as Ray reports it — its peers would otherwise wait in a
    collective until their timeout; a dead ``also`` raises ``_EngineLost``; any other error
    is raised as Ray raises it, also as soon as it is known."""
    ray = require_ray()
    died = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
    rank = {r: i for i, r in enumerate(refs)}
    pending = [*refs, *([also] if also is not None else [])]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(ready[0])
        except died as e:
            if ready[0] in rank:
                raise TrainerLost(rank[ready[0]], e) from e
            raise _EngineLost() from e
    return ray.get(refs)


class _EngineLost(Exception):
    """The engine side of a weight sync died (the push records it and goes on)."""
