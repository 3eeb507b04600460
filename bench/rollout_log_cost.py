"""What the rollout log costs a run: bytes per step on disk and seconds per step in the driver.

    python bench/rollout_log_cost.py                          # the quickstart's log
    python bench/rollout_log_cost.py RUN_LOG_DIR [...]

Reads a finished run's ``LOG_DIR/rollouts/step_*.parquet`` (their sizes and row counts) and
``LOG_DIR/metrics.jsonl`` (``time/rollout_log_s``: the driver's seconds writing the step's file,
plus its trainer logprob pass when ``logger.rollouts.trainer_logprobs`` is on; ``time/step_s``:
the whole step). The first step is reported apart: it pays one-time costs (the first Parquet
write, the tokenizer's first decode). Prints one block per run; medians over the other steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pyarrow.parquet as pq


def report(log_dir: Path) -> str:
    files = sorted((log_dir / "rollouts").glob("step_*.parquet"))
    if not files:
        raise SystemExit(f"{log_dir}: no rollouts/step_*.parquet (not a run's log folder?)")
    sizes = [f.stat().st_size for f in files]
    rows = [pq.read_metadata(f).num_rows for f in files]
    metrics = {}
    for line in (log_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        metrics[m["step"]] = m
    steps = [int(f.stem.removeprefix("step_")) for f in files]
    log_s = [metrics.get(s, {}).get("time/rollout_log_s") for s in steps]
    step_s = [metrics.get(s, {}).get("time/step_s") for s in steps]
    rest = [(a, b) for a, b in zip(log_s[1:], step_s[1:], strict=True) if a is not None and b]
    med_log = statistics.median(a for a, _ in rest) if rest else float("nan")
    med_step = statistics.median(b for _, b in rest) if rest else float("nan")
    share = statistics.median(a / b for a, b in rest) if rest else float("nan")
    return "\n".join(
        [
            f"{log_dir}: {len(files)} steps, {sum(rows)} trajectories, {sum(sizes) / 1e6:.2f} MB",
            f"  bytes per step: median {statistics.median(sizes) / 1e3:.1f} kB "
            f"({statistics.median(sizes) / statistics.median(rows):.0f} B per trajectory)",
            f"  first step: {log_s[0] or 0:.3f} s writing (one-time costs)",
            f"  later steps: median {med_log:.3f} s writing of a median {med_step:.2f} s step "
            f"(median share {100 * share:.2f}%)",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("log_dirs", nargs="*", default=["results/quickstart/logs"])
    for d in p.parse_args().log_dirs:
        print(report(Path(d)))


if __name__ == "__main__":
    main()
