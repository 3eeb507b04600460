"""The per-episode record of an external scaffold's requests, and its assembly into trajectories.

Every request the endpoint serves for an episode appends one :class:`Turn`: the prompt token ids
the engine was given, the completion token ids it sampled, their logprobs and policy versions —
the engine's own tokens, never a re-tokenisation of the text the scaffold saw.

Assembly (:func:`assemble`) follows prime-rl's *best-effort interleaving* (verifiers'
trajectory steps, ``docs/training/trajectories.md`` of PrimeIntellect-ai/prime-rl): turns are
merged into one sample while the **extension property** holds — turn k's prompt starts with
turn k−1's prompt + completion, token for token — and a new sample starts where it breaks (the
scaffold compacted or edited its history, or the chat template re-renders earlier turns
differently). Token layout of one sample (``T`` tokens)::

    prompt_1 | completion_1 | obs_1 | completion_2 | obs_2 | ... | completion_k

with ``obs_i = prompt_{i+1}[len(prompt_i) + len(completion_i):]`` (the tool results and the next
generation prompt the scaffold sent), masked out of the loss (``policy_mask`` False, logprob 0,
version −1). A broken prefix is never patched over: patching would pair tokens the engine did
not see with logprobs it computed on others (the importance ratio would be wrong). The endpoint
keeps the extension property wherever the scaffold sends its history back unchanged (the
token-in-token-out rendering of :mod:`dockyard.train.endpoint.chat`), so a split means the
scaffold itself changed what the model saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dockyard.core.experience import Trajectory


@dataclass
class Turn:
    """One served request.

    Attributes:
        prompt_ids: ``[P]`` the token ids the engine was prompted with.
        completion_ids: ``[C]`` the token ids it sampled.
        logprobs: ``[C]`` their generation logprobs.
        policy_versions: ``[C]`` the policy version that sampled each token.
        finish_reason: ``stop`` / ``length`` / ``abort``.
        tokens_reused: the prompt was built from the previous turn's tokens (token-in-token-out)
            rather than re-rendered from the request's text.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    finish_reason: str = "stop"
    tokens_reused: bool = False

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        if len(self.logprobs) != n or len(self.policy_versions) != n:
            raise ValueError(
                f"turn: {n} completion tokens but {len(self.logprobs)} logprobs and "
                f"{len(self.policy_versions)} versions"
            )


@dataclass
class EpisodeRecord:
    """The turns of one episode, in the order the endpoint served them."""

    key: str
    turns: list[Turn] = field(default_factory=list)
    closed: bool = False

    def add(self, turn: Turn) -> None:
        if self.closed:
            raise RuntimeError(f"episode {self.key}: a request after the episode ended")
        self.turns.append(turn)

    @property
    def context(self) -> list[int]:
        """The last turn's prompt + completion (what a token-in-token-out prompt extends)."""
        if not self.turns:
            return []
        t = self.turns[-1]
        return [*t.prompt_ids, *t.completion_ids]


def extends(prefix: list[int], ids: list[int]) -> bool:
    """Whether ``ids`` starts with ``prefix`` (the extension property of one step)."""
    return len(ids) >= len(prefix) and ids[: len(prefix)] == prefix


def segments(turns: list[Turn]) -> list[list[Turn]]:
    """``turns`` cut where the extension property breaks (see the module docstring)."""
    out: list[list[Turn]] = []
    for t in turns:
        if out:
            last = out[-1][-1]
            if extends([*last.prompt_ids, *last.completion_ids], t.prompt_ids):
                out[-1].append(t)
                continue
        out.append([t])
    return out


def _sample(uid: str, turns: list[Turn], result: Any, meta: dict[str, Any]) -> Trajectory:
    ids: list[np.ndarray] = []
    mask: list[np.ndarray] = []
    lps: list[np.ndarray] = []
    vers: list[np.ndarray] = []
    done = 0  # tokens already laid out
    for t in turns:
        fresh = np.asarray(t.prompt_ids[done:], dtype=np.int64)  # prompt_1, then obs_i
        ids.append(fresh)
        mask.append(np.zeros(len(fresh), dtype=bool))
        lps.append(np.zeros(len(fresh), dtype=np.float32))
        vers.append(np.full(len(fresh), -1, dtype=np.int32))
        ids.append(np.asarray(t.completion_ids, dtype=np.int64))
        mask.append(np.ones(len(t.completion_ids), dtype=bool))
        lps.append(np.asarray(t.logprobs, dtype=np.float32))
        vers.append(np.asarray(t.policy_versions, dtype=np.int32))
        done = len(t.prompt_ids) + len(t.completion_ids)
    return Trajectory(
        prompt_id=uid,
        token_ids=np.concatenate(ids),
        policy_mask=np.concatenate(mask),
        gen_logprobs=np.concatenate(lps),
        policy_versions=np.concatenate(vers),
        rewards=dict(result.rewards),
        finish_reason=turns[-1].finish_reason,
        infra_error=bool(result.infra_error),
        metadata=meta,
    )


def assemble(uid: str, record: EpisodeRecord, result: Any, **metadata: Any) -> list[Trajectory]:
    """The episode's trajectories (one per extension segment, each carrying the episode's
    reward ``result``: a :class:`~dockyard.core.interfaces.environment.StepResult`).

    Metadata per trajectory: the environment's, ``metadata`` given here, ``turns`` (requests in
    the segment), ``episode_turns``, ``segment`` / ``segments`` (index, count: more than one
    means the scaffold broke the extension property), ``tokens_reused`` (turns whose prompt
    was the previous turn's tokens + the new messages). An episode without a single request
    (the scaffold failed before asking) is one empty trajectory marked ``infra_error`` with
    ``metadata["error"]``, so it is masked, never scored."""
    segs = segments(record.turns)
    if not segs:
        empty = np.zeros(0, dtype=np.int64)
        return [
            Trajectory(
                prompt_id=uid,
                token_ids=empty,
                policy_mask=empty.astype(bool),
                gen_logprobs=empty.astype(np.float32),
                policy_versions=empty.astype(np.int32),
                infra_error=True,
                finish_reason="abort",
                metadata={
                    **result.metadata,
                    **metadata,
                    "turns": 0,
                    "episode_turns": 0,
                    "error": metadata.get("error") or "the scaffold made no request",
                },
            )
        ]
    out = []
    for i, seg in enumerate(segs):
        meta = {
            **result.metadata,
            **metadata,
            "turns": len(seg),
            "episode_turns": len(record.turns),
            "segment": i,
            "segments": len(segs),
            "tokens_reused": sum(t.tokens_reused for t in seg),
        }
        out.append(_sample(uid, seg, result, meta))
    return out
