"""Does the quickstart really learn? Run it for several seeds; held-out pass rate before/after.

    python bench/quickstart_learning.py                 # seeds 0 1 2
    python bench/quickstart_learning.py --seeds 0 1 2 3 --steps 30

Each seed builds its own model, warm-starts it with SFT and runs asynchronous GRPO (the full
`dockyard quickstart`). Prints one row per seed and the median gain; the goal is a clear gain in
every seed, far beyond the seed-to-seed spread of the starting point.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

LINE = re.compile(r"held-out pass rate: ([0-9.]+)% -> ([0-9.]+)%")


def run_seed(seed: int, steps: int, out: str, extra: list[str]) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "dockyard.train.cli",
        "quickstart",
        "--seed",
        str(seed),
        "--steps",
        str(steps),
        "--no-progress",
        "--output",
        f"{out}/seed{seed}",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = LINE.search(proc.stdout)
    if proc.returncode != 0 or m is None:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"seed {seed}: the quickstart failed (exit {proc.returncode})")
    return float(m.group(1)), float(m.group(2)), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--output", default="results/bench_quickstart")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    rows = []
    for s in args.seeds:
        before, after, secs = run_seed(s, args.steps, args.output, args.overrides)
        rows.append((s, before, after, secs))
        print(f"seed {s}: {before:.1f}% -> {after:.1f}%  ({secs:.0f} s)", flush=True)
    print()
    print("| seed | held-out before | held-out after | gain (points) | ratio | wall s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s, b, a, t in rows:
        ratio = a / b if b else float("inf")
        print(f"| {s} | {b:.1f}% | {a:.1f}% | {a - b:+.1f} | {ratio:.2f}x | {t:.0f} |")
    gains = [a - b for _, b, a, _ in rows]
    spread = statistics.pstdev([b for _, b, _, _ in rows]) if len(rows) > 1 else 0.0
    print(
        f"\nmedian gain {statistics.median(gains):+.1f} points; min gain {min(gains):+.1f}; "
        f"seed-to-seed spread of the start {spread:.1f} points"
    )
    return 0 if min(gains) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
