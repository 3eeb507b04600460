"""The shipped cleanroom tasks (``data/<name>/``, written by ``build.py``) and their prompts.

A task dict::

    {"id": "programbench/<name>", "name", "language": "c" | "python", "python": "3.11" | None,
     "readme": str, "executable_b64": str, "examples": [case], "tests": [case],
     "fingerprint": {"sha256", "windows"}, "instruction": str}

with ``case = {"argv", "stdin", "stdout", "stderr", "exit"}``. ``tests`` (held out) and
``fingerprint`` stay with the environment; the agent sees ``./executable`` and ``README.md``
(multi-turn) or the README and ``examples`` (single-turn).

The instructions follow ProgramBench's task statement (the ``instance_template`` of
``mini-swe-agent`` 2.4.6, ``minisweagent/config/benchmarks/programbench.yaml``: the executable
at ``./executable``, documentation beside it, a ``./compile.sh`` that builds an ``./executable``
of identical behaviour; no wrapping, copying, decompiling or network), shortened for small
context windows and adapted to dockyard's tools.
"""

from __future__ import annotations

import base64
import json
from importlib import resources
from pathlib import Path
from typing import Any

RULES = (
    "Do not wrap, call, copy or embed the original (in any encoding), decompile or trace it, or "
    "use the network: the original is absent when you are judged, and this scores 0."
)

MULTI_TURN = (
    "Reverse-engineer `./executable` (docs: `README.md`). Write an original implementation with "
    "identical stdout, stderr and exit status for any arguments and stdin, and a `compile.sh` "
    "that builds it into `./executable` (run as `bash compile.sh` in a fresh copy of your files; "
    "gcc and python3 are available). Run the program to learn what it does, then call "
    "submit.\n\n{rules}"
)

SINGLE_TURN = (
    "This is a reverse-engineering task. Below are the documentation of a program and some of "
    "its runs. Write a new implementation with identical behaviour (standard output, standard "
    "error and exit status for any arguments and standard input), plus a `compile.sh` that "
    "builds it into `./executable` (it runs as `bash compile.sh`; C (gcc) and Python 3 are "
    'available). Answer with every file in a block\n\n<file path="NAME">\nCONTENT\n</file>\n\n'
    "{rules}\n\n## README.md\n\n{readme}\n## Example runs\n\n{examples}"
)


def data_dir() -> Path:
    return Path(str(resources.files("dockyard.envs.programbench").joinpath("data")))


def _show(case: dict[str, Any]) -> str:
    argv = " ".join(json.dumps(a) if (not a or " " in a or '"' in a) else a for a in case["argv"])
    return (
        f"$ ./executable {argv}".rstrip() + f"\nstdin: {json.dumps(case['stdin'])}\n"
        f"stdout: {json.dumps(case['stdout'])}\nstderr: {json.dumps(case['stderr'])}\n"
        f"exit status: {case['exit']}\n"
    )


def load_task(d: Path) -> dict[str, Any]:
    """One task from its folder (``executable``, ``README.md``, ``task.json``)."""
    meta = json.loads((d / "task.json").read_text())
    readme = (d / "README.md").read_text()
    task = {
        **meta,
        "id": f"programbench/{meta['name']}",
        "readme": readme,
        "executable_b64": base64.b64encode((d / "executable").read_bytes()).decode(),
    }
    task["instruction"] = MULTI_TURN.format(rules=RULES)
    task["single_turn_instruction"] = SINGLE_TURN.format(
        rules=RULES, readme=readme, examples="\n".join(_show(c) for c in meta["examples"])
    )
    return task


def load_programbench_tasks(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every task under ``path`` (default: the shipped ones), sorted by name."""
    root = Path(path) if path is not None else data_dir()
    dirs = sorted(p for p in root.iterdir() if (p / "task.json").is_file()) if root.is_dir() else []
    if not dirs:
        raise FileNotFoundError(
            f"no cleanroom tasks under {root}: build them with "
            "`python -m dockyard.envs.programbench.build`"
        )
    return [load_task(d) for d in dirs]


def programbench_dataset(split: str, path: str | None = None) -> list[dict[str, Any]]:
    """The ``programbench`` dataset: the shipped tasks (the same for every split; ``path``
    reads tasks built elsewhere with ``build --out``)."""
    return load_programbench_tasks(path)
