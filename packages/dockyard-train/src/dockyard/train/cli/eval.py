"""`dockyard eval --config FILE [--models A B ...] [--output DIR] [overrides...]`: pass@k,
maj@k and per-subject breakdowns of one or several models on a benchmark or a held-out set.

``eval.benchmark`` (+ ``eval.path``, its local copy) picks a benchmark of the registry
(``dockyard eval --list`` names them); null evaluates ``data.val_path`` / ``data.dataset_name``
with ``env``, as GRPO's validation does. The models (``--models``, else ``eval.models``, else
``policy.model_name``) are Hugging Face folders or dockyard checkpoints; the engines are
``policy.generation``'s (vLLM, its ``max_new_tokens``, top-p), the samples ``eval.num_samples``
at ``eval.temperature``. Writes ``results.json``, ``samples.jsonl``, ``table.md`` and
``plot.png`` to ``eval.output_dir`` (``--output``) and prints the table.
"""

from __future__ import annotations

import argparse

from dockyard.core.config import MasterConfig
from dockyard.core.config.errors import ConfigError
from dockyard.envs.benchmarks import benchmark_names, get_benchmark
from dockyard.train.preflight import _creatable, check_models, deep_check, load_or_exit, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config (examples/configs/eval.yaml)")
    parser.add_argument("--models", nargs="+", default=None, help="models to evaluate (one table)")
    parser.add_argument("--output", default=None, help="folder for the results (eval.output_dir)")
    parser.add_argument("--list", action="store_true", help="list the registered benchmarks")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: eval.num_samples=8")


def _list() -> int:
    for name in benchmark_names():
        spec = get_benchmark(name)
        print(f"{name:12s} env {spec.env:6s} {spec.description}")
    return 0


def _problems(cfg: MasterConfig, models: list[str]) -> list[str]:
    """What the eval needs beyond the shared pre-flight: its models, its output folder."""
    # lazy: dockyard.train.eval imports Ray and the runtime (heavy: ~2 s); --list needs neither
    from dockyard.train.eval.plan import is_checkpoint, model_problems

    problems = model_problems(models) + _creatable("eval.output_dir", cfg.eval.output_dir)
    for m in models:
        if not is_checkpoint(m):
            one = cfg.model_copy(deep=True)
            one.policy.model_name = m
            problems += [
                p.replace("policy.model_name", f"eval.models ({m})")
                for p in check_models(one, False)
            ]
    return problems


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if not args.config:
        raise SystemExit("dockyard eval: --config FILE is required (or --list)")
    overrides = list(args.overrides) + ([f"eval.output_dir={args.output}"] if args.output else [])
    cfg = load_or_exit(args.config, overrides, "eval")
    from dockyard.train.eval import evaluate  # lazy: Ray (heavy, ~2 s), as in _problems
    from dockyard.train.eval.plan import plan

    try:  # the tasks are read now: a wrong path or layout is reported before anything starts
        the_plan = plan(cfg)
    except (ValueError, ImportError) as e:
        report("eval", ConfigError([f"eval: {e}"], args.config))
    models = list(args.models or cfg.eval.models or [cfg.policy.model_name])
    # no trainer runs (no loss, no transport); the models are checked one by one below
    skip = ("loss", "transport", "models", "outputs")
    if problems := deep_check(the_plan.cfg, load=False, skip=skip) + _problems(cfg, models):
        report("eval", ConfigError(problems, args.config))

    result = evaluate(cfg, models)
    print(result.table, flush=True)
    print(f"dockyard eval: results in {result.files['results']}", flush=True)
    return 0
