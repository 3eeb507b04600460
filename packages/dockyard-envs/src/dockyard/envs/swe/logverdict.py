"""A verdict from a test log, for test commands the sandbox's pytest runner does not drive.

Where an instance's environment spec (:mod:`dockyard.envs.swe.specs`) names a non-pytest test
command (Django's ``runtests.py``, SymPy's ``bin/test``...), ``finish`` runs that command as the
task's ``test_command`` and :func:`judge_log` reads per-test statuses out of its output with
SWE-bench's log parser: a test counts as passed when the parser says ``PASSED`` or ``XFAIL``
(SWE-bench's grading), and a ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` id the log does not mention is
``missing`` (failed). The log is the tests' own output, which the code under test could forge
(SANDBOX-THREATS row 12): such results carry ``metadata["verdict_source"] = "log_parser"``, and
pytest-driven repositories never take this path.
"""

from __future__ import annotations

from typing import Any

from dockyard.envs.swe.specs import EnvSetup, parse_test_log
from dockyard.sandbox.models import TaskResult, TestOutcome, Verdict

_PASSING = ("PASSED", "XFAIL")
_FINAL = (Verdict.infra_error, Verdict.patch_rejected, Verdict.timeout, Verdict.oom,
          Verdict.resource_limit)  # fmt: skip


def test_command(setup: EnvSetup, task: dict[str, Any]) -> str:
    """The setup's test command followed by the test files to run: SWE-bench Pro's
    ``selected_test_files_to_run`` where the instance has it (what Pro's run script runs),
    else the files SWE-bench's test patch touches, else the files of the held-out ids."""
    files = sorted({t.split("::", 1)[0] for t in [*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]]})
    selected = task.get("selected_test_files_to_run")
    if isinstance(selected, list) and selected:
        files = [str(f) for f in selected]
    elif setup.source == "swebench":
        try:
            # lazy: swebench is the optional swebench extra (and takes 2 s to import)
            from swebench.harness.test_spec.python import get_test_directives

            files = list(get_test_directives(task))  # type: ignore[arg-type]
        except (ImportError, KeyError, ValueError):
            pass
    return " ".join([setup.test_cmd, *files]).strip()


def judge_log(result: TaskResult, setup: EnvSetup, task: dict[str, Any]) -> TaskResult:
    """``result`` with ``tests`` / ``resolved`` / ``verdict`` from its parsed log (see above)."""
    if Verdict(result.verdict) in _FINAL:
        return result
    statuses = parse_test_log(
        setup, result.stdout + "\n" + result.stderr, task if setup.source == "swebench" else None
    )
    tests: dict[str, TestOutcome] = {}
    for tid in [*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]]:
        st = statuses.get(tid)
        tests[tid] = (
            TestOutcome.missing
            if st is None
            else TestOutcome.passed
            if st in _PASSING
            else TestOutcome.failed
        )
    resolved = all(v == TestOutcome.passed for v in tests.values()) and not result.tests_tampered
    meta = {**result.metadata, "verdict_source": "log_parser", "log_parser": setup.log_parser}
    return result.model_copy(
        update={
            "tests": tests,
            "resolved": resolved,
            "verdict": Verdict.passed if resolved else Verdict.failed,
            "metadata": meta,
        }
    )
