"""Generation and scoring for ``dockyard eval`` on the inference fleet, with GRPO's machinery.

:class:`EvalStack` is the :class:`~dockyard.train.runtime.stack.Stack` of a GRPO run without
its trainer: the same vLLM (or transformers) engine actors, placed and started from
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

from dockyard.train.runtime.collector import CollectorHost, group_seed
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.stack import Stack


class _NoTrainer:
    """The trainer fleet an evaluation does not start (what :class:`Stack` calls on one)."""

    def __init__(self) -> None:
        self.actors: list[Any] = []

    def ready(self) -> list[Any]:
        return []

    def shutdown(self) -> None:
        pass


class EvalStack(Stack):
    """A :class:`Stack` whose trainer fleet is never started: engines (+ sandbox) only."""

    def _start_trainer(self, cpus: float) -> Any:
        return _NoTrainer()


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
            from dockyard.train.batching import passed
            from dockyard.train.rollout import rollout_group

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


def run_model(cfg: Any, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start an :class:`EvalStack` serving ``cfg.policy.model_name``, score ``tasks`` through
    an :class:`Evaluator` (``eval.num_samples`` at ``eval.temperature``), stop it all; returns
    :meth:`Evaluator.evaluate`'s records."""
    import ray

    e = cfg.eval
    stack = EvalStack(cfg, e.output_dir, wait=True)
    evaluator: Any = None
    try:
        evaluator = (
            ray.remote(Evaluator)
            .options(num_cpus=0, max_concurrency=1000)
            .remote(
                # the collector's own config; an evaluation keeps no pipeline (A = 0)
                CollectorConfig.from_master(cfg, cfg.grpo.num_prompts_per_step, 0),
                stack.engines.actors,
                stack.buffer,
                stack.sandbox_urls,
                tasks,
                stack.judge_engines,
            )
        )
        concurrency = max(16, 4 * len(stack.engines))
        ref = evaluator.evaluate.remote(tasks, e.num_samples, e.temperature, e.seed, concurrency)
        out: list[dict[str, Any]] = ray.get(ref)
        return out
    finally:
        if evaluator is not None:
            ray.kill(evaluator)
        stack.shutdown()
