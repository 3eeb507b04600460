"""`dockyard distill --config FILE [--dry-run] [overrides...]`: on-policy distillation.

``loss_fn``: ``type: distillation`` with ``teacher_model_name`` (a frozen causal LM with the
student's vocabulary) or ``teachers`` (several, ``{model_name, weight}``, any tokenizer, combined
by ``teacher_combination``), ``topk``, ``temperature``, ``kl_type`` (forward | reverse). The student
is ``policy.model_name``; it samples on the environment's prompts (``env``, ``data``) as GRPO
does, and every key of the GRPO loop applies (``grpo.*``: prompts and samples per step, steps,
asynchrony, validation; checkpoints, ``--resume``). The run ends with the held-out task score
and KL to the teacher, before -> after (:mod:`dockyard.train.algorithms.distill`).

The config passes the pre-flight first (:mod:`dockyard.train.preflight`, as ``dockyard train``)
plus the distillation's own checks: the teacher folders, a single teacher's vocabulary against
the student's, the torch trainer. ``--dry-run`` runs them all (the model loads included) and starts nothing.
"""

from __future__ import annotations

import argparse

from dockyard.core.config.errors import ConfigError
from dockyard.train.algorithms.distillation import distill_problems
from dockyard.train.preflight import ON_THE_WORKERS, deep_check, load_or_exit, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, help="YAML config (examples/configs/distillation.yaml)"
    )
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run every pre-flight check (the model and tokenizer load too), start nothing",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides: loss_fn.topk=16")


def run(args: argparse.Namespace) -> int:
    cfg = load_or_exit(args.config, args.overrides, "distill")  # the schema and the names
    skip = ON_THE_WORKERS if cfg.cluster.address and not args.dry_run else ()
    problems = deep_check(cfg, load=args.dry_run, skip=skip, driver="distill")
    if cfg.loss_fn.type == "distillation":  # its own checks: the teacher, the trainer
        problems += distill_problems(cfg, models="models" not in skip)
    if problems:
        report("distill", ConfigError(problems, args.config))
    if args.dry_run:
        print(
            f"dockyard distill: OK: {args.config} passes every check; nothing started", flush=True
        )
        return 0
    # lazy: the driver imports Ray (heavy, ~1 s), which --dry-run does without
    from dockyard.train.algorithms.distill import train

    result = train(cfg, resume=args.resume, progress=not args.no_progress)
    if result.val:  # before -> after (steps 0 and the last, when both were validated)
        first, last = result.val[min(result.val)], result.val[max(result.val)]
        print(
            f"held-out pass rate: {_pct(first.get('val/pass_rate'))} -> "
            f"{_pct(last.get('val/pass_rate'))}; held-out KL to the teacher: "
            f"{_num(first.get('val/distill_kl'))} -> {_num(last.get('val/distill_kl'))} "
            f"(steps {min(result.val)} -> {max(result.val)})"
            + (
                f"; tokens aligned to a teacher: {_pct(last['val/distill_aligned'])}"
                if "val/distill_aligned" in last
                else ""
            ),
            flush=True,
        )
    print(f"logs: {result.log_dir}  plot: {result.plot}", flush=True)
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
