"""GDPval single-turn: the response is a Python program that writes the deliverables.

Episode: the program (the last ```python block) is written to a fresh sandbox session's empty
workspace and run there (``python make_deliverables.py``, ``run_timeout_s``), with the libraries
of ``dockyard-sandbox[office]`` importable (openpyxl, python-docx, fpdf2, Pillow: the sandbox's
interpreter is the service's own). Each deliverable is then fetched from the workspace through the
service (``get_file``: confined to the workspace, 16 MiB at most), read in a limited child process
(:mod:`dockyard.envs.gdpval.parse`) and graded on the task's rubric
(:mod:`dockyard.envs.gdpval.rubric`).

Reward: ``reward/tests`` = the rubric score (``fraction``, the default) or 1 only when every
scored criterion is fully met (``binary``). A program that fails, times out or writes nothing is
graded on what it left (usually 0): a verdict. The sandbox unreachable or failing → ``infra_error``
(masked); a judge judgment that failed → masked too, ``metadata["judge_failed"]``. Metadata:
``criteria`` (each criterion's score and detail), ``files``, ``rubric_score``, ``judge_skipped``,
the program's ``exit_code`` and output tail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.code.extract import extract_code
from dockyard.envs.gdpval.parse import ParseLimits
from dockyard.envs.gdpval.rubric import Graded, grade
from dockyard.envs.judging import JudgeFn, require_judge
from dockyard.envs.rewards import TESTS, RewardConfig, approx_token_count, infra_failure
from dockyard.envs.sandboxed import SandboxPool
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.models import Limits, SessionCreate, Verdict

LIBRARIES = (
    "Python 3 with csv (standard library), openpyxl (xlsx), python-docx (import docx), fpdf2 "
    "(from fpdf import FPDF) and Pillow (PIL) installed; no network"
)
GDPVAL_SYSTEM = (
    "You produce work files for a professional task. Answer with one Python program in a "
    "```python block; it runs in an empty working directory and must write the requested files "
    f"there. Available: {LIBRARIES}. Write values into spreadsheets, not formulas."
)
PROGRAM = "make_deliverables.py"


def user_message(task: dict[str, Any]) -> str:
    files = "\n".join(f"- {d}" for d in task["deliverables"])
    return f"{task['instruction']}\n\nDeliver these files in the working directory:\n{files}"


def rubric_step(graded: Graded, mode: str, **metadata: Any) -> StepResult:
    """The step of a graded rubric (masked when a judgment failed)."""
    meta = {"rubric_score": graded.score, "criteria": graded.criteria, "files": graded.files,
            "judge_failed": graded.judge_failed, "judge_skipped": graded.skipped,
            **metadata}  # fmt: skip
    if graded.judge_failed:
        return infra_failure("judge_failed", **meta)
    full = all(r["score"] >= 1.0 for r in graded.criteria if r["score"] is not None)
    reward = graded.score if mode == "fraction" else float(full)
    return StepResult(rewards={TESTS: reward}, metadata={**meta, "resolved": full})


class GdpvalEnvironment(BaseEnvironment):
    """Deliverables written by a program in the sandbox (see the module docstring).

    Args:
        sandbox_urls: sandbox service URL(s) (from the runtime).
        judge: the runtime's judge (``needs_judge``); required when ``use_judge``.
        use_judge: grade ``judge`` criteria (false: skip them; the score is over the
            deterministic criteria alone).
        timeout_s: the program's wall-clock limit in the sandbox.
        reward: ``mode: fraction`` (the rubric score, default) or ``binary``.
        limits: the sandbox session's limits (memory, processes, disk).
        parse_limits: caps on reading each deliverable (:class:`ParseLimits`).
    """

    name = "gdpval"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        judge: JudgeFn | None = None,
        use_judge: bool = True,
        timeout_s: float = 60.0,
        token: str | None = None,
        reward: RewardConfig | dict[str, Any] | None = None,
        limits: Limits | dict[str, Any] | None = None,
        parse_limits: ParseLimits | dict[str, Any] | None = None,
        system_prompt: str = GDPVAL_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
    ) -> None:
        if isinstance(reward, dict):
            reward = RewardConfig(**reward)
        super().__init__(reward or RewardConfig(mode="fraction"), count_tokens)
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.judge = require_judge(judge, "gdpval") if use_judge else None
        self.timeout_s = timeout_s
        self.limits = Limits.model_validate(limits or {"memory_mb": 1024, "pids": 64})
        self.parse_limits = (
            ParseLimits(**parse_limits) if isinstance(parse_limits, dict) else parse_limits
        )
        self.system_prompt = system_prompt

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": user_message(task)},
        ]

    async def run_program(
        self, task: dict[str, Any], program: str
    ) -> tuple[dict[str, bytes | None], dict[str, Any]] | str:
        """Run ``program`` in a fresh session; ``(files, run metadata)``, or the reason of an
        infra failure (a str)."""
        client = self.pool.client()
        sid = None
        try:
            spec = SessionCreate.model_validate({"limits": self.limits, "ttl_s": 600.0})
            sid = await client.create_session(spec)
            await client.put_file(sid, PROGRAM, program)
            res = await client.exec(sid, f"python {PROGRAM}", timeout_s=self.timeout_s)
            if res.verdict == Verdict.infra_error:
                return f"sandbox infra_error: {res.stderr[:300]}"
            files: dict[str, bytes | None] = {}
            for d in task["deliverables"]:
                try:
                    files[d] = await client.get_file(sid, d)
                except SandboxRequestError:  # not there, not a file, too large: not delivered
                    files[d] = None
            meta = {"exit_code": res.exit_code, "timed_out": res.timed_out,
                    "run_verdict": res.verdict.value if res.verdict else None,
                    "output_tail": (res.stdout + res.stderr)[-500:]}  # fmt: skip
            return files, meta
        except (SandboxUnavailable, httpx.HTTPError) as e:
            return f"sandbox: {type(e).__name__}: {e}"
        finally:
            if sid is not None:
                with contextlib.suppress(SandboxRequestError, httpx.HTTPError):
                    await client.delete_session(sid)

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        program, fenced = extract_code(response)
        if not fenced or not program.strip():  # nothing to run: every criterion fails
            files: dict[str, bytes | None] = dict.fromkeys(task["deliverables"])
            run: dict[str, Any] = {"exit_code": None, "no_program": True}
        else:
            got = await self.run_program(task, program)
            if isinstance(got, str):
                return infra_failure(got, task_id=task.get("id"))
            files, run = got
        graded = await grade(task, files, self.judge, self.parse_limits)
        step = rubric_step(graded, self.reward.mode, task_id=task.get("id"), **run)
        return self._shape(step, response)
