"""Does the agent quickstart learn? `dockyard quickstart --agent` for several seeds; held-out pass
rate before/after multi-turn GRPO.

    python bench/quickstart_agent_learning.py                 # seeds 0 1 2, the recipe's steps
    python bench/quickstart_agent_learning.py --seeds 0 1 2 3 --steps 20

Each seed builds its own tiny model, warm-starts it with SFT on scripted episodes of the tool
protocol (check, the tool's response, submit) and runs asynchronous multi-turn GRPO with every
tool call and submission executed by the sandbox service. Prints one row per seed and the
median gain; the goal is a clear gain in every seed, well beyond the spread of the start. The
learning test (tests/integration/test_quickstart_agent.py) takes its threshold from these rows.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

LINE = re.compile(r"held-out pass rate: ([0-9.]+)% -> ([0-9.]+)%")


def run_seed(
    seed: int, steps: int | None, out: str, extra: list[str]
) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "dockyard.train.cli", "quickstart", "--agent", "--no-progress"]
    cmd += ["--seed", str(seed), "--output", f"{out}/seed{seed}"]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True)
    m = LINE.search(proc.stdout)
    if proc.returncode != 0 or m is None:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"seed {seed}: the agent quickstart failed (exit {proc.returncode})")
    return float(m.group(1)), float(m.group(2)), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the recipe's)")
    ap.add_argument("--output", default="results/bench_quickstart_agent")
    ap.add_argument("overrides", nargs="*", help="passed on (e.g. --sft-steps 100, key=value)")
    args, unknown = ap.parse_known_args()
    rows = []
    for s in args.seeds:
        before, after, secs = run_seed(s, args.steps, args.output, unknown + args.overrides)
        rows.append((s, before, after, secs))
        print(f"seed {s}: {before:.1f}% -> {after:.1f}%  ({secs:.0f} s)", flush=True)
    print()
    print("| seed | held-out before | held-out after | gain (points) | wall s |")
    print("|---:|---:|---:|---:|---:|")
    for s, b, a, t in rows:
        print(f"| {s} | {b:.1f}% | {a:.1f}% | {a - b:+.1f} | {t:.0f} |")
    gains = [a - b for _, b, a, _ in rows]
    spread = statistics.pstdev([b for _, b, _, _ in rows]) if len(rows) > 1 else 0.0
    print(
        f"\nmedian gain {statistics.median(gains):+.1f} points; min gain {min(gains):+.1f}; "
        f"seed-to-seed spread of the start {spread:.1f} points"
    )
    return 0 if min(gains) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
