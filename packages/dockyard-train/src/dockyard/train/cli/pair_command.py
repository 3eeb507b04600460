"""What the offline pair commands share (`dockyard dpo`, `dockyard rm`): the arguments, the
checks, the worker, the loop (:mod:`dockyard.train.algorithms.pair_loop`), the metrics log, the
accuracy plot and the closing line. Each command is a :class:`PairCommand`: its names, its own
checks, its worker and its algorithm's strategy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.core.config.errors import ConfigError
from dockyard.train.algorithms.configs import prompt_renderer
from dockyard.train.algorithms.dpo import load_data
from dockyard.train.algorithms.pair_loop import PairStrategy, loop_options, train_on_pairs
from dockyard.train.logging import MetricsLogger, plot_curves
from dockyard.train.preflight import deep_check, load_or_exit, report
from dockyard.train.prompts import PromptRenderer


@dataclass(frozen=True)
class PairCommand:
    """One offline pair command: ``name`` (``dpo``), its example config, an override shown in
    ``--help``, what the output model is, ``title(cfg)`` for the closing line, the held-out
    metric it reports (``accuracy``, and how it is said), its own ``problems(cfg)`` (beside the
    pre-flight's), its ``worker(cfg)``, its ``strategy(cfg, renderer)``, the pair parser of its
    data (None: DPO's) and its plot (file name and curves; titled ``title(cfg)``)."""

    name: str
    example: str
    override: str
    output: str
    title: Callable[[Any], str]
    accuracy: str
    accuracy_words: str
    problems: Callable[[Any], list[str]]
    worker: Callable[[Any], Any]
    strategy: Callable[[Any, PromptRenderer], PairStrategy]
    parse: Callable[[dict[str, Any], str], dict[str, Any]] | None
    plot: tuple[str, tuple[tuple[str, str], ...]]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", required=True,
                            help=f"YAML config (examples/configs/{self.example})")  # fmt: skip
        parser.add_argument("--output", default=None, help=f"folder for the trained {self.output}")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        parser.add_argument("overrides", nargs="*", help=f"dotted overrides: {self.override}")

    def run(self, args: argparse.Namespace) -> int:
        cfg = load_or_exit(args.config, args.overrides, self.name)  # the schema and the names
        # the loss, the model, the data files, the output folders; no engine, sandbox or
        # transport: these commands start none
        skip = ("extras", "engine", "sandbox", "transport")
        problems = deep_check(cfg, load=False, skip=skip, driver=self.name) + self.problems(cfg)
        if problems:
            report(self.name, ConfigError(problems, args.config))
        out = args.output or cfg.checkpointing.export_hf or str(Path(cfg.logger.log_dir) / "model")
        train, val = load_data(cfg, self.parse)
        worker = self.worker(cfg)
        from transformers import AutoTokenizer  # lazy: optional, with the torch extra

        p = cfg.policy
        renderer = prompt_renderer(  # chat template, prompt and system files
            cfg, AutoTokenizer.from_pretrained(p.tokenizer.name or p.model_name)
        )
        log = MetricsLogger(
            cfg.logger, cfg.grpo.max_num_steps, config_dict=cfg.model_dump(mode="json"),
            progress=not args.no_progress, desc=self.name,
        )  # fmt: skip
        try:
            result = train_on_pairs(self.strategy(cfg, renderer), worker, train, val,
                                    **loop_options(cfg), output_dir=out, log=log)  # fmt: skip
        finally:
            log.close()
        plot = plot_curves(log, cfg.logger, self.plot[0], self.title(cfg), self.plot[1])
        print(
            f"{self.title(cfg)}: {len(result.history)} steps on {len(train)} pairs, final loss "
            f"{result.history[-1]['loss']:.4f}; held-out {self.accuracy_words} "
            f"{_accuracy(result.val, self.accuracy)} on {len(val)} pairs; model in {out}; logs in "
            f"{log.dir}; plot: {plot}",
            flush=True,
        )
        return 0


def _accuracy(val: dict[int, dict[str, float]], key: str) -> str:
    if not val:
        return "not measured (grpo.val_at_start, val_period and val_at_end are off)"
    steps = sorted({min(val), max(val)})
    return " -> ".join(f"{val[s][key]:.3f} (step {s})" for s in steps)
