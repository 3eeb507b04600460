"""``dockyard eval``: generate on a held-out set with the inference fleet, score every sample
with a verifier environment, report pass@k, maj@k and per-subject breakdowns.

Two modes (``eval.benchmark``):

* **a benchmark** of the registry (:mod:`dockyard.envs.benchmarks`: MATH-500, AIME, GPQA, MMLU,
  MMLU-Pro, local math files, HumanEval, ...) read from its local copy (``eval.path``), each task
  carrying its ground truth, scored by the benchmark's environment (math-verify, the strict
  ``Answer: X`` multiple-choice verifier, the sandboxed code tests);
* **a task set and an environment** as GRPO's validation builds them (``data.val_path`` or
  ``data.dataset_name``'s ``val`` split, ``env``): any environment of the registry.

The loop, once per model (``eval.models`` / ``--models``: Hugging Face folders or dockyard
checkpoints, several giving one table)::

    tasks = plan(cfg)                                     # benchmark or data + env
    for model in models:
        folder  = serveable(model)                        # a checkpoint is exported first
        records = run_model(stack, collector, tasks)      # a Stack without trainer and the
                                                          #   Evaluator actor: n samples per
                                                          #   task, scored
        summary = summarize(records, pass_k, maj_k, group_by)
    report.write(results.json, samples.jsonl, table.md, plot.png); print(table)
    (+ each sample in the rollout log's format: output_dir/rollouts/eval_<label>.parquet)

Metrics: :mod:`dockyard.train.eval.metrics` (the unbiased pass@k estimator, majority voting).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.train.algorithms.configs import collector_config, stack_config
from dockyard.train.eval import report
from dockyard.train.eval.fleet import run_model
from dockyard.train.eval.metrics import summarize
from dockyard.train.eval.plan import model_label, plan, serveable
from dockyard.train.rollouts import RolloutLog

__all__ = ["EvalResult", "evaluate"]


@dataclass
class EvalResult:
    """Every model's summary (``overall``, ``by``) and sample records, and the files written."""

    results: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    table: str = ""


def evaluate(cfg: MasterConfig, models: list[str] | None = None) -> EvalResult:
    """Evaluate ``models`` (default ``eval.models``, else ``policy.model_name``) per ``cfg``
    (a ``MasterConfig``); see the module docstring."""
    e = cfg.eval
    the_plan = plan(cfg)
    models = list(models or e.models or [cfg.policy.model_name])
    out = Path(e.output_dir)
    tasks = the_plan.tasks
    labels = _labels(models)
    results = []
    for model, label in zip(models, labels, strict=True):
        t0 = time.perf_counter()
        run_cfg = the_plan.cfg.model_copy(deep=True)
        run_cfg.policy.model_name = serveable(model, out, label)
        records = run_model(
            stack_config(run_cfg, trainer=None),  # the engines serve the model; no trainer
            collector_config(run_cfg, run_cfg.grpo.num_prompts_per_step, 0),  # no pipeline
            tasks,
            e,
        )
        _log_rollouts(cfg, label, run_cfg.policy, [r.pop("rollouts") for r in records])
        for r in records:
            r["group"] = {k: tasks[r["index"]].get(k) for k in the_plan.group_by}
        summary = summarize(records, e.pass_k, e.maj_k, the_plan.group_by)
        summary["overall"]["skipped_long_prompts"] = float(len(tasks) - len(records))
        samples = [
            _sample(r, tasks[r["index"]], i, s) for r in records for i, s in enumerate(r["samples"])
        ]
        seconds = time.perf_counter() - t0
        results.append(
            {
                "label": label,
                "model": model,
                "summary": summary,
                "samples": samples,
                "seconds": seconds,
            }
        )
        print(f"dockyard eval: {label}: {_headline(summary)} ({seconds:.0f} s)", flush=True)
    settings = {"benchmark": the_plan.name, **e.model_dump(mode="json")}
    head = f"{the_plan.name}: {len(tasks)} tasks, {e.num_samples} samples each"
    table = f"{head} at temperature {e.temperature}\n\n" + report.table(results)
    files = report.write(out, results, settings)
    return EvalResult(results, files, table)


def _log_rollouts(cfg: MasterConfig, label: str, policy: Any, groups: list[Any]) -> None:
    """Every sample as ``eval.output_dir/rollouts/eval_<label>.parquet``, the rollout log's
    format (``logger.rollouts``; ``dockyard view OUTPUT_DIR`` shows it)."""
    log = RolloutLog.open(
        cfg.logger.rollouts,
        cfg.eval.output_dir,
        tokenizer=policy.tokenizer.name or policy.model_name,
        env=",".join(cfg.env),
        initial_step=None,
    )
    if log is not None:
        log.write_eval(label, groups)


def _labels(models: list[str]) -> list[str]:
    """A distinct short name per model (``-2``, ``-3`` appended to a repeated one)."""
    out: list[str] = []
    for m in models:
        label, k = model_label(m), 2
        while label in out:
            label, k = f"{model_label(m)}-{k}", k + 1
        out.append(label)
    return out


def _headline(summary: dict[str, Any]) -> str:
    o = summary["overall"]
    return ", ".join(f"{k} {100 * v:.1f}%" for k, v in o.items() if k.startswith(("pass@", "maj@")))


def _sample(
    record: dict[str, Any], task: dict[str, Any], index: int, s: dict[str, Any]
) -> dict[str, Any]:
    """One line of ``samples.jsonl``: the sample and the ground truth it was scored against."""
    gold = task.get("answer", task.get("expected"))
    return {"id": record["id"], "sample": index, "gold": gold, **record["group"], **s}
