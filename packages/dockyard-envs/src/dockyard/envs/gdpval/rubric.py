"""Grade a task's deliverables against its rubric: deterministic checks, then the judge.

    score = Σ_c w_c · s_c / Σ_c w_c        over the criteria c that were scored

``s_c`` ∈ [0, 1] comes from :func:`dockyard.envs.gdpval.checks.score` for deterministic types,
or from the LLM judge for ``{"type": "judge", "criterion": ..., "files": [...]}``: the judge reads
the task, the criterion and a text rendering of the named deliverables (their parsed text,
sheets as tab-separated rows; a PNG as its size, which a text judge cannot see beyond). A judge
criterion whose files are all missing or malformed scores 0 without a request. Without a judge
(``use_judge: false``) judge criteria are *skipped* — left out of both sums and counted in
``skipped`` — so the score is over the deterministic criteria alone; a run says so in metadata.
A judgment that failed makes :attr:`Graded.judge_failed` true: the caller masks the sample.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.gdpval import checks
from dockyard.envs.gdpval.parse import ParseLimits, parse_file
from dockyard.envs.judging import JudgeFn

JUDGE_PROMPT = """\
A professional was given this task and produced the files shown as the response.

[Task]
{instruction}

[Criterion]
{criterion}

Score how well the delivered files meet this one criterion (the highest score: fully; the lowest: \
not at all). Judge only the criterion."""

RENDER_CHARS = 6000
"""Characters of each deliverable's rendering the judge reads."""


@dataclass
class Graded:
    """A rubric's outcome: ``score`` ∈ [0, 1]; ``criteria``: one ``{"id", "type", "weight",
    "score" (None: skipped), "detail"}`` each; ``files``: per deliverable ``"ok"`` or why not."""

    score: float
    criteria: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    judge_failed: bool = False
    skipped: int = 0


def render(path: str, summary: dict[str, Any] | None) -> str:
    """What the judge reads of one deliverable."""
    if summary is None:
        return f"=== {path}: missing or malformed ==="
    if summary.get("image"):
        im = summary["image"]
        body = f"(a PNG image, {im['width']}x{im['height']} pixels, mode {im['mode']})"
    else:
        body = summary.get("text", "")
    if len(body) > RENDER_CHARS:
        body = body[:RENDER_CHARS] + "\n[... cut ...]"
    return f"=== {path} ===\n{body}"


async def read_deliverables(
    files: Mapping[str, bytes | None], limits: ParseLimits | None = None
) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    """``(summaries, status)``: each file's summary (None: missing or malformed) and ``"ok"``
    or why not, read concurrently in limited child processes."""

    async def one(path: str, data: bytes | None) -> dict[str, Any]:
        if data is None:
            return {"ok": False, "error": "missing"}
        return await parse_file(path, data, limits)

    paths = list(files)
    outs = await asyncio.gather(*(one(p, files[p]) for p in paths))
    summaries = {p: (o["summary"] if o["ok"] else None) for p, o in zip(paths, outs, strict=True)}
    status = {p: ("ok" if o["ok"] else o["error"]) for p, o in zip(paths, outs, strict=True)}
    return summaries, status


async def grade(
    task: dict[str, Any],
    files: Mapping[str, bytes | None],
    judge: JudgeFn | None,
    limits: ParseLimits | None = None,
) -> Graded:
    """Grade ``files`` (deliverable path → bytes, None when it was not produced) against
    ``task["rubric"]`` (see the module docstring)."""
    summaries, status = await read_deliverables(files, limits)
    out = Graded(0.0, files=status)
    pending: list[tuple[dict[str, Any], Any]] = []
    for c in task["rubric"]:
        row = {"id": c["id"], "type": c["type"], "weight": float(c.get("weight", 1.0)),
               "score": None, "detail": ""}  # fmt: skip
        out.criteria.append(row)
        if c["type"] != "judge":
            row["score"], row["detail"] = checks.score(c, summaries.get(c["file"]))
            continue
        if judge is None:
            row["detail"] = "skipped: no judge (use_judge: false)"
            out.skipped += 1
            continue
        names = c.get("files") or list(files)
        if all(summaries.get(n) is None for n in names):
            row["score"], row["detail"] = 0.0, "its files are missing or malformed"
            continue
        prompt = JUDGE_PROMPT.format(instruction=task["instruction"], criterion=c["criterion"])
        shown = "\n\n".join(render(n, summaries.get(n)) for n in names)
        pending.append((row, judge(prompt, shown)))
    for row, s in zip((r for r, _ in pending), await asyncio.gather(*(j for _, j in pending)),
                      strict=True):  # fmt: skip
        if s is None:
            out.judge_failed = True
            row["detail"] = "the judgment failed (masked)"
        else:
            row["score"], row["detail"] = float(s), "judged"
    scored = [r for r in out.criteria if r["score"] is not None]
    total = sum(r["weight"] for r in scored)
    out.score = sum(r["weight"] * r["score"] for r in scored) / total if total else 0.0
    return out
