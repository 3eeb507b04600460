"""``eval``: what ``dockyard eval`` measures — a registered benchmark read from a local copy,
or (``benchmark`` null) the held-out set of ``data`` scored by the config's ``env``, as GRPO's
validation is — and how (samples per task, temperature, which pass@k and maj@k)."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from dockyard.core.config._base import ConfigModel


class EvalConfig(ConfigModel):
    """The evaluation run of ``dockyard eval``."""

    benchmark: str | None = None
    """A benchmark of the registry (``math500``, ``aime``, ``gpqa``, ``mmlu``, ``mmlu_pro``, ``local_math``, ``humaneval``, ...; ``dockyard eval --list`` names them); null: the tasks of ``data.val_path`` / ``data.dataset_name`` (its ``val`` split) scored by ``env``."""
    path: str | None = None
    """The benchmark's local copy: a ``save_to_disk`` folder, a Parquet file or folder, JSONL / JSON or CSV (null: the data a package ships, HumanEval's only)."""
    split: str | None = None
    """Which split of a folder holding several (null: ``test``, else ``validation``, else the only one)."""
    models: list[str] = Field(default_factory=list)
    """Models to evaluate, one after the other, in one table: Hugging Face folders (or Hub names) and dockyard checkpoints (a ``checkpoint_dir``, a ``step_<n>/``; exported first); empty: ``policy.model_name``. ``--models`` on the command line replaces it."""
    num_samples: PositiveInt = 1
    """Samples per task (n of pass@k)."""
    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature (0: greedy decoding, for ``num_samples: 1``); top-p / top-k and ``max_new_tokens`` are ``policy.generation``'s."""
    pass_k: list[PositiveInt] = Field(default_factory=lambda: [1])
    """The k of each pass@k reported (unbiased estimator over the ``num_samples`` samples; each k at most ``num_samples``)."""
    maj_k: list[PositiveInt] = Field(default_factory=list)
    """The k of each maj@k reported (majority vote over the extracted answers of the first k samples; each k at most ``num_samples``)."""
    max_tasks: PositiveInt | None = None
    """Evaluate the first this many tasks only (null: all)."""
    group_by: list[str] | None = None
    """Task keys the results are broken down by (null: the benchmark's own, e.g. MMLU's ``subject``, MATH's ``subject`` and ``level``; none in the data mode)."""
    seed: NonNegativeInt = 0
    """Seeds the sampling and the benchmark's own shuffling (GPQA's choice order)."""
    output_dir: str = "results/eval"
    """Folder for ``results.json``, ``samples.jsonl`` (one line per sample), ``table.md`` and ``plot.png``."""

    @model_validator(mode="after")
    def _ks(self) -> EvalConfig:
        errors = [
            f"eval.{key}: k={k} exceeds eval.num_samples ({self.num_samples}): raise "
            f"eval.num_samples to at least {k}"
            for key in ("pass_k", "maj_k")
            for k in getattr(self, key)
            if k > self.num_samples
        ]
        if self.num_samples > 1 and self.temperature == 0.0:
            errors.append(
                f"eval.temperature 0 (greedy) with eval.num_samples {self.num_samples}: the "
                "samples would all be the same; set eval.temperature > 0 (e.g. 0.6) or "
                "eval.num_samples: 1"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self
