"""Evaluation metrics over n scored samples per task.

**pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): with
n samples of a task of which c pass, the probability that at least one of k drawn without
replacement passes, unbiased for the pass@k of k independent samples:

    pass@k = 1 − C(n − c, k) / C(n, k)  =  1 − ∏_{i = n−c+1}^{n} (1 − k / i)

(the product form, as the paper's numpy code computes it, never forms a large binomial),
averaged over tasks. Samples whose scoring failed (``infra_error``) are left out of n; a task
with fewer than k scored samples is left out of pass@k (counted in ``tasks_short``).

**maj@k** (majority voting, "self-consistency", Wang et al. 2022): the answer extracted most
often from the task's first k samples is the model's answer; maj@k is the share of tasks where
it is correct. Answers are compared after :func:`normalize_answer`; samples without an answer
do not vote (none at all: the task counts as wrong). Ties go to the answer that reached the top
count first in sample order, so the vote is deterministic. The first k, not every k-subset:
the samples are seeded per task, so the first k are as random as any k.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task with ``c`` of ``n`` samples passing (``k ≤ n``)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def normalize_answer(answer: Any) -> str | None:
    """The form answers are voted in: whitespace and ``$`` removed, a trailing ``.`` dropped
    (``" 3/4 ."`` and ``"3/4"`` vote together); None or empty: None."""
    if answer is None:
        return None
    text = "".join(str(answer).split()).replace("$", "").rstrip(".")
    return text or None


def majority(answers: Sequence[Any]) -> int | None:
    """The index of the first sample holding the majority answer (ties: the answer that
    reached the top count first), None when no sample has an answer."""
    keys = [normalize_answer(a) for a in answers]
    counts: Counter[str] = Counter()
    best: str | None = None
    for key in keys:
        if key is None:
            continue
        counts[key] += 1
        if best is None or counts[key] > counts[best]:
            best = key
    return None if best is None else keys.index(best)


def maj_at_k(answers: Sequence[Any], correct: Sequence[bool], k: int) -> float:
    """1.0 if the majority answer of the first ``k`` samples is correct, else 0.0."""
    i = majority(answers[:k])
    return float(i is not None and bool(correct[i]))


def task_metrics(
    correct: Sequence[bool], answers: Sequence[Any], pass_k: Sequence[int], maj_k: Sequence[int]
) -> dict[str, float]:
    """``pass@k`` / ``maj@k`` of one task's scored samples (a k above their number: absent)."""
    n, c = len(correct), sum(bool(x) for x in correct)
    out = {f"pass@{k}": pass_at_k(n, c, k) for k in pass_k if k <= n}
    out.update({f"maj@{k}": maj_at_k(answers, correct, k) for k in maj_k if k <= n})
    return out


def summarize(
    records: list[dict[str, Any]],
    pass_k: Sequence[int],
    maj_k: Sequence[int],
    group_by: Sequence[str] = (),
) -> dict[str, Any]:
    """Means over tasks: ``overall`` and, per key of ``group_by``, per value of that key.

    ``records``: one per task, ``{"group": {key: value}, "samples": [{"correct": bool,
    "answer": str | None, "infra_error": bool}, ...]}`` (what :mod:`dockyard.train.eval.fleet`
    returns)."""
    rows = []
    for r in records:
        scored = [s for s in r["samples"] if not s["infra_error"]]
        m = task_metrics(
            [s["correct"] for s in scored], [s["answer"] for s in scored], pass_k, maj_k
        )
        rows.append((r, m, len(r["samples"]) - len(scored)))

    def mean(part: list[tuple[dict[str, Any], dict[str, float], int]]) -> dict[str, float]:
        out: dict[str, float] = {"tasks": float(len(part))}
        for key in [f"pass@{k}" for k in pass_k] + [f"maj@{k}" for k in maj_k]:
            vals = [m[key] for _, m, _ in part if key in m]
            out[key] = sum(vals) / len(vals) if vals else float("nan")
        out["infra_errors"] = float(sum(bad for _, _, bad in part))
        out["tasks_short"] = float(sum(1 for _, m, _ in part if len(m) < len(pass_k) + len(maj_k)))
        return out

    by: dict[str, dict[str, dict[str, float]]] = {}
    for key in group_by:
        values = sorted({str(r["group"].get(key)) for r, _, _ in rows})
        by[key] = {v: mean([x for x in rows if str(x[0]["group"].get(key)) == v]) for v in values}
    return {"overall": mean(rows), "by": by}
