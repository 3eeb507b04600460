"""Metrics sinks: a tqdm progress bar on stdout, JSONL, TensorBoard, W&B (offline), a PNG plot.

``MetricsLogger.log(step, metrics)`` writes one step's flat ``{name: float}`` dict to every
enabled sink: ``log_dir/metrics.jsonl`` (one JSON object per line, with ``step``),
``log_dir/tensorboard/`` (event files), ``log_dir/wandb/`` (``wandb`` in offline mode unless
``logger.wandb.mode: online``). :func:`plot_rewards` draws the reward curve of a JSONL file.

Steps: step ``s ≥ 1`` is training step ``s`` just finished; step 0 is the run before training
(its ``val/*`` validation). A fresh run (``initial_step`` 0) replaces what an earlier run left in
the same ``log_dir`` (the JSONL is rewritten, TensorBoard purges every older event); a resumed
or rewound run keeps the steps up to the one it restarts from, step 0 included.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from tqdm import tqdm

from dockyard.core.config.sections import LoggerConfig

# the metrics shown in the progress bar's postfix, in order, with a short label
_BAR_KEYS = (
    ("reward/mean", "reward"),
    ("pass_rate", "pass"),
    ("val/pass_rate", "val"),
    ("staleness/mean", "age"),
    ("time/step_s", "s/step"),
)
# the printed line (``logger.print_period``): the bar's keys and where the time goes
_LINE_KEYS = (
    *_BAR_KEYS,
    ("train/loss", "loss"),
    ("tokens_per_s/gen", "gen tok/s"),
    ("tokens_per_s/train", "train tok/s"),
    ("infra_error_fraction", "masked"),
)


class MetricsLogger:
    """Writes step metrics to the sinks ``logger_cfg`` enables (a ``LoggerConfig``).

    Args:
        logger_cfg: ``MasterConfig.logger``.
        total_steps: for the progress bar.
        initial_step: the step a resumed run starts from.
        config_dict: the resolved run config (W&B's run config, TensorBoard text).
        progress: show the tqdm bar (off when stdout is not wanted, e.g. in tests).
    """

    def __init__(
        self,
        logger_cfg: LoggerConfig,
        total_steps: int,
        initial_step: int = 0,
        config_dict: dict[str, Any] | None = None,
        progress: bool = True,
        desc: str = "grpo",
    ) -> None:
        self.cfg = logger_cfg
        self.dir = Path(logger_cfg.log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.dir / "metrics.jsonl"
        self._jsonl = None
        if logger_cfg.jsonl_enabled:
            if initial_step == 0 and self.jsonl_path.exists():
                self.jsonl_path.unlink()
            elif initial_step > 0:
                _truncate_jsonl(self.jsonl_path, initial_step)
            self._jsonl = self.jsonl_path.open("a")
        self._tb = None
        if logger_cfg.tensorboard_enabled:
            # events after the resumed-from step are the abandoned run's (a fresh run: all
            # earlier events are an earlier run's): purged
            self._tb = _tensorboard_writer(
                self.dir / "tensorboard", initial_step + 1 if initial_step else 0
            )
        self._wandb = None
        if logger_cfg.wandb_enabled:
            self._wandb = _wandb_run(logger_cfg, self.dir, config_dict or {}, initial_step)
        self._bar = None
        if progress:
            self._bar = tqdm(
                total=total_steps,
                initial=initial_step,
                desc=desc,
                file=sys.stdout,
                dynamic_ncols=True,
                leave=True,
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` of training step ``step`` (1-based: the step just finished; 0:
        before training: the first validation)."""
        clean = {k: float(v) for k, v in metrics.items() if _finite(v)}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(clean, step=step)
        if self._bar is not None:
            post = {label: f"{clean[k]:.3g}" for k, label in _BAR_KEYS if k in clean}
            self._bar.set_postfix(post, refresh=False)
            self._bar.update(max(step - self._bar.n, 0))
        if step > 0 and step % self.cfg.print_period == 0:
            shown = "  ".join(f"{label} {clean[k]:.4g}" for k, label in _LINE_KEYS if k in clean)
            self.write(f"step {step}: {shown}")

    def rewind(self, step: int) -> None:
        """Go back to ``step`` (a run that rewound to a checkpoint): the JSONL keeps steps ≤
        ``step``, TensorBoard purges later events, the bar shows ``step``. W&B cannot take
        steps back: its redone steps are dropped by W&B with a warning."""
        if self._jsonl is not None:
            self._jsonl.close()
            _truncate_jsonl(self.jsonl_path, step)
            self._jsonl = self.jsonl_path.open("a")
        if self._tb is not None:
            self._tb.close()
            self._tb = _tensorboard_writer(self.dir / "tensorboard", step + 1)
        if self._bar is not None:
            self._bar.n = step
            self._bar.refresh()

    def write(self, line: str) -> None:
        """Print a line without breaking the progress bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _truncate_jsonl(path: Path, initial_step: int) -> None:
    """Keep the lines of steps ≤ ``initial_step`` (a resumed run rewrites what follows)."""
    if not path.exists():
        return
    keep = [
        ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= initial_step
    ]
    path.write_text("".join(ln + "\n" for ln in keep))


def read_jsonl_metrics(path: str | Path) -> list[dict[str, float]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


_TB_FILES = itertools.count()


def _tensorboard_writer(folder: Path, purge_step: int | None) -> Any:
    try:
        from tensorboardX import SummaryWriter  # lazy: tensorboardX is optional (tensorboard extra)
    except ImportError as e:
        raise ImportError(
            'logger.tensorboard_enabled needs tensorboardX: pip install "dockyard-train[tensorboard]"'
        ) from e
    # tensorboardX names event files by the second: a writer reopened within a second (a
    # rewind) would overwrite the previous file, so each writer gets its own suffix
    suffix = f".{os.getpid()}.{next(_TB_FILES)}"
    return SummaryWriter(str(folder), purge_step=purge_step, filename_suffix=suffix)


def _wandb_run(
    cfg: LoggerConfig, folder: Path, config_dict: dict[str, Any], initial_step: int
) -> Any:
    try:
        # lazy: wandb is optional (wandb extra)
        import wandb  # pyright: ignore[reportMissingImports]
    except ImportError as e:
        raise ImportError(
            'logger.wandb_enabled needs Weights & Biases: pip install "dockyard-train[wandb]"'
        ) from e
    return wandb.init(
        project=cfg.wandb.project,
        name=cfg.wandb.name,
        mode=cfg.wandb.mode,
        dir=str(folder),
        config=config_dict,
        resume="allow" if initial_step else None,
    )


_REWARD_CURVES = (("reward/mean", "-"), ("pass_rate", "--"), ("val/pass_rate", "o-"))


def plot_rewards(
    jsonl_path: str | Path,
    png_path: str | Path,
    title: str = "GRPO",
    curves: tuple[tuple[str, str], ...] = _REWARD_CURVES,
) -> Path:
    """Reward (and pass rate, validation pass rate where logged) against step, as a PNG;
    ``curves``: other ``(metric, matplotlib line style)`` pairs to draw instead."""
    try:
        import matplotlib  # lazy: matplotlib is optional (plot extra)
    except ImportError as e:
        raise ImportError(
            'the reward plot needs matplotlib: pip install "dockyard-train[plot]"'
        ) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after choosing the Agg backend above

    rows = read_jsonl_metrics(jsonl_path)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for key, style in curves:
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, style, label=key)
    ax.set_xlabel("training step")
    ax.set_ylabel("value")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(png_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_curves(
    log: MetricsLogger, cfg_logger: Any, name: str, title: str, curves: tuple[tuple[str, str], ...]
) -> str:
    """Draw ``curves`` of a finished run's metrics.jsonl as ``LOG_DIR/<name>.png``
    (:func:`plot_rewards`); its path, or why none was drawn (no JSONL log, no matplotlib), for
    a driver's closing line."""
    if not cfg_logger.jsonl_enabled:
        return "none (logger.jsonl_enabled is false)"
    if importlib.util.find_spec("matplotlib") is None:
        return 'none (needs matplotlib: pip install "dockyard-train[plot]")'
    return str(plot_rewards(log.jsonl_path, Path(log.dir) / f"{name}.png", title, curves))


def process_age_s() -> float:
    """Wall seconds since this process started (its start time, as the OS records it: to a
    clock tick on Linux, where psutil's creation time is rounded by the boot time's whole
    seconds)."""
    try:
        with open("/proc/self/stat") as f:  # field 22, after the parenthesised command name
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time() - psutil.Process().create_time()


def startup_line(startup: dict[str, float], first_step_at: float) -> str:
    """The log line on where a run's start-up went (``startup/*`` seconds)."""
    names = {
        "ray": "Ray",
        "fleets": "fleets",
        "trainer": "trainer",
        "engines": "engines",
        "sandbox": "sandbox",
        "data": "data + collector",
        "validation": "validation",
    }
    parts = []
    for key, label in names.items():
        took = startup.get(f"startup/{key}_s")
        if took is not None:
            parts.append(f"{label} {took:.1f} s")
    return (
        f"start-up: {', '.join(parts)} (the fleets start together); first step done "
        f"{first_step_at:.1f} s after the process started"
    )
