"""Generation and scoring for ``dockyard eval`` on the inference fleet, with GRPO's machinery.

The evaluation's :class:`~dockyard.train.runtime.stack.Stack` is a GRPO run's without its
trainer (its :class:`~dockyard.train.runtime.stack.StackConfig` has none): the same vLLM (or transformers) engine actors, placed and started from
``policy.generation`` the same way, and the sandbox fleet where the environment needs one.
:class:`Evaluator` is the run's :class:`~dockyard.train.runtime.collector.CollectorHost` (the
environment, the prompt renderer, the sampling settings built from the config inside the
actor) with one more call, :meth:`Evaluator.evaluate`: every task's n samples through
:func:`~dockyard.train.rollout.rollout_group`, as validation does, but returned sample by
sample — verdict, extracted answer, response text — where validation returns one pass rate.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import ray

from dockyard.core.config.eval import EvalConfig
from dockyard.train.batching import passed
from dockyard.train.rollout import rollout_group
from dockyard.train.runtime.collector import CollectorHost, group_seed
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.stack import Stack, StackConfig


class Evaluator(CollectorHost):
    """The collector actor of an evaluation (built from the config as the collector is)."""

    async def evaluate(
        self, tasks: list[dict[str, Any]], n: int, temperature: float, seed: int, concurrency: int
    ) -> list[dict[str, Any]]:
        """``n`` samples of each task at ``temperature`` (per-task seeds from ``seed``), at
        most ``concurrency`` tasks in flight; one record per task whose prompt fits the context:
        ``{"id", "index" (in ``tasks``), "samples": [{"correct", "reward", "answer",
        "infra_error", "finish_reason", "response", "tokens"}], "rollouts": the Group}``."""
        params = replace(self.params, n=n, temperature=temperature)
        sem = asyncio.Semaphore(concurrency)
        kept = self.tokenizer.filter_tasks(self.env, tasks, what="evaluation")
        index = {id(t): i for i, t in enumerate(tasks)}  # the kept tasks' places in ``tasks``

        async def one(i: int, task: dict[str, Any]) -> dict[str, Any]:
            async with sem:
                uid = f"eval:{index[id(task)]}:{task.get('id', '')}"
                p = replace(params, seed=group_seed(seed, uid))
                engine = self.engines[i % len(self.engines)]
                group = await rollout_group(
                    engine, self.env, self.tokenizer, task, uid, p, self.max_turns
                )
            samples = []
            for t in group.trajectories:
                ids = t.token_ids[t.policy_mask].tolist()
                samples.append(
                    {
                        "correct": bool(passed(t)) and not t.infra_error,
                        "reward": float(t.reward),
                        "answer": t.metadata.get("extracted"),
                        "infra_error": bool(t.infra_error),
                        "finish_reason": t.finish_reason,
                        "response": self.tokenizer.tokenizer.decode(ids, skip_special_tokens=True),
                        "tokens": len(ids),
                    }
                )
            rec = {"id": str(task.get("id", i)), "index": index[id(task)], "samples": samples}
            return {**rec, "rollouts": group}  # the Group, for the rollout log

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(kept))))


def run_model(
    stack_cfg: StackConfig,
    collector_cfg: CollectorConfig,
    tasks: list[dict[str, Any]],
    options: EvalConfig,
) -> list[dict[str, Any]]:
    """Start a :class:`Stack` from ``stack_cfg`` (no trainer: its engines serve the model),
    score ``tasks`` through an :class:`Evaluator` built from ``collector_cfg``
    (``options.num_samples`` at ``options.temperature``), stop it all; returns
    :meth:`Evaluator.evaluate`'s records."""
    stack = Stack(stack_cfg, options.output_dir, wait=True)
    evaluator: Any = None
    try:
        evaluator = (
            ray.remote(Evaluator)
            .options(num_cpus=0, max_concurrency=1000)
            .remote(
                collector_cfg,
                stack.engines.actors,
                stack.buffer,
                stack.sandbox_urls,
                tasks,
                stack.judge_engines,
            )
        )
        concurrency = max(16, 4 * len(stack.engines))
        o = options
        ref = evaluator.evaluate.remote(tasks, o.num_samples, o.temperature, o.seed, concurrency)
        out: list[dict[str, Any]] = ray.get(ref)
        return out
    finally:
        if evaluator is not None:
            ray.kill(evaluator)
        stack.shutdown()
