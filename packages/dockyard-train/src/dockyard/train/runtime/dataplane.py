"""The data plane: a step's trajectories reach the trainer ranks and the rollout log as Ray
object references; the driver orchestrates and never holds the arrays.

The collectors put complete groups into the replay buffer actor (:class:`StepBuffer`, on the
driver's node). For a step the driver asks it to *draw* groups — they stay in the buffer,
staged, and the driver learns only how many were drawn and kept (dynamic sampling filters them
there) — then to *build* the batch: the buffer shapes the rewards, computes the advantages,
pads the arrays, puts the trainer's view of the batch (and, for the rollout log, the groups)
into Ray's object store, and answers with their references and a summary of a few numbers
(rows, tokens, the rollout metrics, the masked-samples line). The driver hands the batch's
reference to every trainer rank (:meth:`~dockyard.train.runtime.trainer.TrainerClient.hold`:
each rank's process resolves it from the object store, across nodes directly from the
buffer's), the ranks add π_prev / π_ref logprobs to the batch they hold and train on it; the
rollout log is written by :class:`RolloutWriter`, an actor that receives the groups', the
batch's and rank 0's logprobs' references. ``bench/dataplane.py`` measures the bytes the
driver handles per step, before and after.

    driver                       buffer actor                 trainer ranks     rollout writer
    draw(n, step)  ───────────►  wait, filter, stage
    build(P, step) ───────────►  build_batch, ray.put ──ref──►  hold(ref)
    fill_logprobs / train_held ────────────────────────────►  (on the held batch)
    write_step(refs) ─────────────────────────────────────────────────────────────► Parquet
"""

from __future__ import annotations

from typing import Any

from dockyard.core.buffer import AsyncReplayBuffer
from dockyard.core.experience import Group
from dockyard.train.batching import BatchOptions, build_batch, informative_groups, trainer_view
from dockyard.train.metrics import infra_report, rollout_metrics
from dockyard.train.runtime.cluster import require_ray
from dockyard.train.runtime.placement import on_driver_node


class StepBuffer(AsyncReplayBuffer):
    """The replay buffer as the run's Ray actor, which also builds each step's batch (see the
    module docstring). The groups a step draws stay here, *staged*, until :meth:`build`."""

    def __init__(self, max_age: int = 0, capacity: int | None = None) -> None:
        super().__init__(max_age, capacity)
        self._staged: list[Group] = []

    async def draw(
        self, n: int, step: int, timeout_s: float, informative_only: bool, fresh: bool
    ) -> tuple[int, int] | None:
        """Wait for ``n`` groups young enough for ``step`` and stage them (``informative_only``:
        only those whose rewards are not all equal, DAPO's dynamic sampling); ``fresh``: the
        step's first draw (earlier staged groups are dropped). Returns (groups drawn, groups
        staged), or None after ``timeout_s`` without ``n`` groups (nothing drawn)."""
        if fresh:
            self._staged = []
        groups = await self.wait_sample(n, step, timeout_s)
        if groups is None:
            return None
        if informative_only:
            groups_kept = informative_groups(groups)
            self._staged += [g for g, k in zip(groups, groups_kept, strict=True) if k]
        else:
            self._staged += groups
        return len(groups), len(self._staged)

    def build(
        self, n: int, step: int, max_age: int, opts: BatchOptions, keep_groups: bool
    ) -> tuple[list[Any], dict[str, Any]]:
        """The batch of the first ``n`` staged groups (the rest dropped), in the object store.

        Returns ``([batch_ref, groups_ref], summary)``: the trainer's view of the batch
        (:func:`~dockyard.train.batching.trainer_view`) and, with ``keep_groups`` (the rollout
        log), the groups, as references; ``summary``: ``rows``, ``tokens`` (attended),
        ``bytes`` (the batch's arrays), ``metrics`` (:func:`~dockyard.train.metrics.
        rollout_metrics` at ``step`` with age bound ``max_age``) and ``masked`` (the log line
        of samples masked as ``infra_error``, or None)."""
        ray = require_ray()
        groups, self._staged = self._staged[:n], []
        if not groups:
            raise RuntimeError(f"step {step}: no groups were drawn before the batch was built")
        view = trainer_view(build_batch(groups, opts))
        arrays = (view.input_ids, view.attention_mask, view.loss_mask, view.advantages)
        summary = {
            "rows": len(view.input_ids),
            "tokens": int(view.attention_mask.sum()),
            "bytes": sum(int(a.nbytes) for a in (*arrays, view.gen_logprobs)),
            "metrics": rollout_metrics(groups, step, max_age),
            "masked": infra_report(groups, step),
        }
        return [ray.put(view), ray.put(groups) if keep_groups else None], summary

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._staged = []  # a restore (resume, rewind) starts a step afresh


def remote_buffer(max_age: int, capacity: int | None = None, *, name: str | None = None) -> Any:
    """Start a :class:`StepBuffer` as a Ray actor on the driver's node.

    Collectors call ``handle.put.remote(group)``; the GRPO driver ``draw`` and ``build``; other
    drivers ``wait_sample`` (the groups by value). The actor is restarted by Ray if it dies;
    its contents are then restored from the last checkpoint by the driver.
    """
    ray = require_ray()
    opts: dict[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_concurrency": 64}
    opts["scheduling_strategy"] = on_driver_node()  # the run's state stays with the driver
    if name is not None:
        opts["name"] = name
    return ray.remote(StepBuffer).options(**opts).remote(max_age, capacity)


class RolloutWriter:
    """The rollout log (:class:`~dockyard.train.rollouts.log.RolloutLog`) in an actor beside
    the driver: a step's groups, batch and trainer values arrive as object references, so the
    trajectories reach the Parquet files without passing through the driver. One caller, so
    its writes and rewinds happen in the order sent."""

    def __init__(self, cfg: Any, log_dir: str, **kwargs: Any) -> None:
        # lazy: pyarrow and tokenizers, which the buffer actor (this module) does not need
        from dockyard.train.rollouts import RolloutLog

        self.log = RolloutLog(cfg, log_dir, **kwargs)

    def write_step(
        self, step: int, groups: list[Group], batch: Any, values: dict[str, Any] | None
    ) -> str:
        """Write step ``step``; ``values``: rank 0's ``trainer_logprobs`` / ``entropy``
        (:meth:`~dockyard.train.runtime.hosts.PolicyHost.rollout_values`), or None."""
        values = values or {}
        out = self.log.write_step(
            step, groups, batch.advantages, values.get("trainer_logprobs"), values.get("entropy")
        )
        return str(out)

    def rewind(self, step: int) -> None:
        self.log.rewind(step)

    @classmethod
    def start(cls, cfg: Any, log_dir: str, **kwargs: Any) -> Any:
        """The writer as an actor on the driver's node (None when ``cfg`` — ``logger.rollouts``
        — is off)."""
        if not cfg.enabled:
            return None
        ray = require_ray()
        actor = ray.remote(cls).options(num_cpus=0, scheduling_strategy=on_driver_node())
        return actor.remote(cfg, log_dir, **kwargs)
