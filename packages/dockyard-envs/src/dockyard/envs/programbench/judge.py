"""The cleanroom verdict: what is sent to the sandbox, and how its result becomes a reward.

The request uses the sandbox API as it is (no cleanroom-specific code in the service): the
judge (``probe.py``) travels as a held-out ``test_file`` under a random module name, and the
cases of ``function_tests`` call ``judge(op, arg)`` in order (integrity checks, the build, one
``run`` per held-out input, the post-run checks). The *expected* values — the original's
recorded ``{"stdout", "stderr", "exit"}`` and ``False`` for every integrity check — stay in
the trusted service, which compares them with the returned plain data (SANDBOX-THREATS row 17).

Reward (``reward/tests``), with ``k`` the held-out inputs whose three outputs all match::

    0                      if an integrity check failed or did not run (flagged), or the build failed
    k / n                  mode "fraction"
    1 if k == n else 0     mode "binary" (all-or-nothing)

An ``infra_error`` verdict (the service failed) is masked, never scored.
"""

from __future__ import annotations

import secrets
from importlib import resources
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.rewards import TESTS, infra_failure
from dockyard.sandbox.models import FunctionCase, FunctionTests, TaskResult, TestOutcome, Verdict

BEFORE = ("copy", "embedded", "network")
"""Checks of the submission as submitted (nothing of it has run yet)."""
AFTER = ("execs_original", "runtime_copy")
"""Checks after every run."""
FLAG_OF = {
    "copy": "copies_original",
    "embedded": "embeds_original",
    "network": "network",
    "built_copy": "builds_original",
    "execs_original": "execs_original",
    "runtime_copy": "writes_original",
}
"""Case op -> the ``metadata["cleanroom_flags"]`` entry it raises."""


def probe_source() -> str:
    return resources.files("dockyard.envs.programbench").joinpath("probe.py").read_text()


def build_request(
    task: dict[str, Any], build_timeout_s: float = 60.0, run_timeout_s: float = 10.0
) -> tuple[dict[str, str], FunctionTests, list[str]]:
    """``(test_files, function_tests, ops)`` for ``task``: ``ops[i]`` names case ``i``."""
    module = f"_dy_cleanroom_{secrets.token_hex(8)}"
    scan = {"fingerprint": task["fingerprint"], "skip": [f"{module}.py"]}
    cases: list[FunctionCase] = []
    ops: list[str] = []

    def add(op: str, arg: dict[str, Any], expected: Any) -> None:
        cases.append(FunctionCase(args=[op, arg], expected=expected))
        ops.append(op)

    for op in BEFORE:
        add(op, scan, False)
    add("build", {"timeout_s": build_timeout_s}, True)
    add("built_copy", scan, False)
    for t in task["tests"]:
        arg = {"argv": t["argv"], "stdin": t["stdin"], "timeout_s": run_timeout_s}
        add("run", arg, {"stdout": t["stdout"], "stderr": t["stderr"], "exit": t["exit"]})
    for op in AFTER:
        add(op, scan, False)
    ft = FunctionTests(module=module, function="judge", cases=cases)
    return {f"{module}.py": probe_source()}, ft, ops


def request_timeout_s(task: dict[str, Any], build_timeout_s: float, run_timeout_s: float) -> float:
    """Wall clock for the whole judged run: the build, every run at its limit, the scans."""
    return min(3600.0, build_timeout_s + len(task["tests"]) * run_timeout_s + 60.0)


def verdict(result: TaskResult, ops: list[str], mode: str = "fraction", **meta: Any) -> StepResult:
    """The step for a judged run (see the module docstring)."""
    v = Verdict(result.verdict)
    if v == Verdict.infra_error:
        return infra_failure(result.detail or "sandbox infra_error", verdict=v.value, **meta)
    outcome = [result.tests.get(f"case[{i}]", TestOutcome.missing) for i in range(len(ops))]
    flags = [FLAG_OF[op] for op, o in zip(ops, outcome, strict=True) if op in FLAG_OF and o == TestOutcome.failed]  # fmt: skip
    if result.tests_tampered:
        flags.append("report_tampered")
    if v == Verdict.patch_rejected:
        flags.append("submission_rejected")
    unverified = [
        op for op, o in zip(ops, outcome, strict=True)
        if op in FLAG_OF and o in (TestOutcome.missing, TestOutcome.error)
    ]  # fmt: skip
    runs = [o for op, o in zip(ops, outcome, strict=True) if op == "run"]
    passed = sum(o == TestOutcome.passed for o in runs)
    built = outcome[ops.index("build")] == TestOutcome.passed
    if flags or unverified or not built:
        reward = 0.0
    elif mode == "binary":
        reward = 1.0 if passed == len(runs) else 0.0
    else:
        reward = passed / len(runs)
    return StepResult(
        rewards={TESTS: reward},
        metadata={
            "verdict": v.value,
            "cleanroom_flags": flags,
            "integrity_violation": bool(flags),
            "integrity_unverified": unverified,
            "build_ok": built,
            "tests_passed": passed,
            "tests_total": len(runs),
            "tests_passed_fraction": passed / len(runs) if runs else 0.0,
            "sandbox_s": result.timings.total_s,
            # the judge's own notes and the compile.sh tail: informational only (untrusted
            # stream), never read for the reward
            "detail": (result.detail + "\n" + result.stderr[-1500:]).strip()[-2000:],
            **meta,
        },
    )
