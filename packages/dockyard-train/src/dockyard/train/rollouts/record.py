"""One trajectory as one row of the rollout log: its turns as text, its tokens, its scores.

A row is a flat dict of the columns in :data:`SCHEMA` (the Parquet schema every file of the
log shares, so pandas / DuckDB / HF ``datasets`` read a whole ``rollouts/`` folder as one
table). The trajectory's token layout (``prompt | response_1 | observation_1 | response_2 …``)
becomes ``turns``: one span per run of ``policy_mask`` (``assistant``) or of environment tokens
(``prompt`` first, then ``observation``), each with its decoded text and token range. Tool
calls are parsed from each assistant turn with the environments' own parser, so the log shows
what the environment saw (a call, or why the text was not one). Every text is bounded
(:func:`bounded`); nothing is interpreted — the viewer escapes all of it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pyarrow as pa

from dockyard.core.experience import Trajectory
from dockyard.envs.tools.hermes import ParsedCall, parse_tool_calls

# metadata keys that flag a trajectory's integrity (an attempt at the reward, not an answer)
FLAG_KEYS = (
    "tests_tampered",
    "integrity_violation",
    "integrity_unverified",
    "reward_file_missing",
    "reward_file_error",
    "judge_failed",
    "provision_failed",
)
# metadata keys lifted into their own columns (the rest goes to ``metadata_json``)
_TEXT_KEYS = {"stdout": "verifier_stdout", "stderr": "verifier_stderr", "detail": "verifier_detail"}
_DIFF_KEYS = ("patch", "diff")
_DROPPED = {"tool_messages", "files", *FLAG_KEYS, *_TEXT_KEYS, *_TEXT_KEYS.values(), *_DIFF_KEYS}

# one span of the token layout: a role, its decoded text, its tokens [start, end)
_TURN = pa.struct(
    [("role", pa.string()), ("text", pa.string()), ("start", pa.int32()), ("end", pa.int32())]
)
# a tool call parsed from an assistant turn (``turn``: the assistant turn's index), or why not
_TOOL_CALL = pa.struct(
    [
        ("turn", pa.int32()),
        ("name", pa.string()),
        ("arguments", pa.string()),  # JSON (or the unparsed text when not valid)
        ("valid", pa.bool_()),
        ("error", pa.string()),
    ]
)

SCHEMA = pa.schema(
    [
        ("step", pa.int32()),  # the training step that trained on it (eval: 0)
        ("kind", pa.string()),  # "train" | "eval"
        ("run_label", pa.string()),  # eval: the model's label; train: ""
        ("group", pa.int32()),  # the group's index in the step
        ("sample", pa.int32()),  # the trajectory's index in its group
        ("uid", pa.string()),  # the group's uid (its prompt)
        ("task_id", pa.string()),  # the task's id (for `dockyard eval`), else the uid
        ("env", pa.string()),
        ("logged_because", pa.list_(pa.string())),  # "sampled" and/or the outlier reasons
        ("policy_version_min", pa.int32()),
        ("policy_version_max", pa.int32()),
        ("staleness", pa.int32()),  # trained step - the oldest version of its tokens
        ("reward", pa.float64()),
        ("rewards", pa.map_(pa.string(), pa.float64())),  # each reward component
        ("advantage", pa.float32()),  # mean over its loss tokens (0: masked)
        ("finish_reason", pa.string()),
        ("truncated", pa.bool_()),
        ("infra_error", pa.bool_()),
        ("flags", pa.list_(pa.string())),  # integrity flags set by the environment
        ("verdict", pa.string()),
        ("verifier_stdout", pa.string()),
        ("verifier_stderr", pa.string()),
        ("verifier_detail", pa.string()),
        ("diff", pa.string()),  # the final diff / patch (bounded)
        ("files", pa.map_(pa.string(), pa.string())),  # produced files (bounded)
        ("metadata_json", pa.string()),  # the rest of the environment's metadata
        ("num_turns", pa.int32()),
        ("turns", pa.list_(_TURN)),
        ("tool_calls", pa.list_(_TOOL_CALL)),
        ("token_ids", pa.list_(pa.int32())),  # [T]
        ("token_texts", pa.list_(pa.string())),  # [T] each token decoded alone
        ("policy_mask", pa.list_(pa.bool_())),  # [T]
        ("gen_logprobs", pa.list_(pa.float32())),  # [T] the engine's, 0 off the mask
        ("trainer_logprobs", pa.list_(pa.float32())),  # [T] or null (logger.rollouts)
        ("entropy", pa.list_(pa.float32())),  # [T] the trainer's, nats, or null (logger.rollouts)
        ("policy_versions", pa.list_(pa.int32())),  # [T] -1 off the mask
        ("response_tokens", pa.int32()),
        ("env_s", pa.float64()),
        ("gen_s", pa.float64()),  # the group's generation time
    ]
)


def bounded(text: Any, limit: int) -> str:
    """``text`` as a string of at most about ``limit`` characters: its head and tail around a
    ``[... N chars cut ...]`` marker."""
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    half = max(limit // 2, 1)
    return f"{s[:half]}\n[... {len(s) - 2 * half} chars cut ...]\n{s[-half:]}"


def spans(mask: np.ndarray) -> list[tuple[str, int, int]]:
    """``(role, start, end)`` per run of ``mask`` (``[T] bool``): True runs are ``assistant``;
    False runs ``prompt`` (the first, at 0) or ``observation``."""
    out: list[tuple[str, int, int]] = []
    m = np.asarray(mask, dtype=bool)
    if m.size == 0:
        return out
    cuts = np.flatnonzero(np.diff(m.astype(np.int8))) + 1
    bounds = [0, *cuts.tolist(), int(m.size)]
    for a, b in itertools.pairwise(bounds):
        role = "assistant" if m[a] else ("prompt" if a == 0 else "observation")
        out.append((role, a, b))
    return out


def _tool_calls(turns: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    out = []
    assistant = [t for t in turns if t["role"] == "assistant"]
    for i, turn in enumerate(assistant):
        for item in parse_tool_calls(turn["text"]).items:
            if isinstance(item, ParsedCall):
                args = bounded(json.dumps(item.arguments, ensure_ascii=False), limit)
                call = {"name": item.name, "arguments": args, "valid": True, "error": ""}
            else:
                raw = bounded(item.raw, limit)
                err = f"{item.kind}: {item.message}"
                call = {"name": "", "arguments": raw, "valid": False, "error": err}
            out.append({"turn": i, **call})
    return out


def _files(value: Any, limit: int) -> list[tuple[str, str]] | None:
    if not isinstance(value, dict):
        return None
    return [(bounded(k, 512), bounded(v, limit)) for k, v in value.items()]


def trajectory_row(
    t: Trajectory,
    decode: Any,
    limit: int,
    **context: Any,
) -> dict[str, Any]:
    """The log row of ``t``.

    Args:
        decode: a :class:`~dockyard.train.rollouts.log.Decoder` (``text(ids)``, ``tokens(ids)``).
        limit: :func:`bounded`'s bound on each text.
        context: the columns the trajectory does not know: ``step``, ``kind``, ``run_label``,
            ``group``, ``sample``, ``task_id``, ``env``, ``logged_because``, ``staleness``, ``advantage``,
            ``trainer_logprobs`` and ``entropy`` (``[T] float32`` or None), ``gen_s``.
    """
    ids = np.asarray(t.token_ids).astype(np.int64).tolist()
    mask = np.asarray(t.policy_mask, dtype=bool)
    full = [
        {"role": role, "text": decode.text(ids[a:b]), "start": a, "end": b}
        for role, a, b in spans(mask)
    ]
    turns = [{**x, "text": bounded(x["text"], limit)} for x in full]
    md = t.metadata
    versions = np.asarray(t.policy_versions)[mask]
    rest = {k: v for k, v in md.items() if k not in _DROPPED}
    tlp = context.pop("trainer_logprobs", None)
    ent = context.pop("entropy", None)
    row: dict[str, Any] = {
        "uid": t.prompt_id,
        "task_id": str(md.get("task_id") or md.get("instance_id") or t.prompt_id),
        "policy_version_min": int(versions.min()) if versions.size else -1,
        "policy_version_max": int(versions.max()) if versions.size else -1,
        "reward": t.reward,
        "rewards": list(t.rewards.items()),
        "finish_reason": t.finish_reason,
        "truncated": t.finish_reason == "length",
        "infra_error": bool(t.infra_error),
        "flags": [k for k in FLAG_KEYS if md.get(k) is True],
        "verdict": str(md.get("verdict") or md.get("infra_reason") or ""),
        **{col: bounded(md.get(key) or md.get(col), limit) for key, col in _TEXT_KEYS.items()},
        "diff": bounded(next((md[k] for k in _DIFF_KEYS if md.get(k)), ""), limit),
        "files": _files(md.get("files"), limit),
        "metadata_json": bounded(json.dumps(rest, default=str, ensure_ascii=False), limit),
        "num_turns": int(md.get("turns", sum(r == "assistant" for r, _, _ in spans(mask)))),
        "turns": turns,
        "tool_calls": _tool_calls(full, limit),
        "token_ids": ids,
        "token_texts": decode.tokens(ids),
        "policy_mask": mask.tolist(),
        "gen_logprobs": np.asarray(t.gen_logprobs, dtype=np.float32).tolist(),
        "trainer_logprobs": None
        if tlp is None
        else np.asarray(tlp, np.float32)[: len(ids)].tolist(),
        "entropy": None if ent is None else np.asarray(ent, np.float32)[: len(ids)].tolist(),
        "policy_versions": np.asarray(t.policy_versions).astype(np.int32).tolist(),
        "response_tokens": int(mask.sum()),
        "env_s": float(md.get("env_s", 0.0)),
        **context,
    }
    return row
