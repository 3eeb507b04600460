"""The SFT driver: masked NLL on chat data, on the same policy worker GRPO trains with.

An example is ``{"messages": [{"role": ..., "content": ...}, ...]}``; the last message is the
assistant's answer. The prompt (the messages before it) is rendered as GRPO renders its prompts
(:class:`~dockyard.train.prompts.PromptRenderer`: the chat template or plain text, the system
prompt and prompt files); the answer's tokens (and the end-of-turn token) carry the loss:

    L = − Σ_bt m_bt · log π(x_bt | x_b,<t) / Σ_bt m_bt       (m: answer tokens)

    for step in range(steps):
        batch   = collate(next B examples)        # prompt via the renderer, answer + EOS
        metrics = worker.train_step(batch, MaskedNLLLoss())
        log(step, metrics)
    worker.export_hf(output_dir)                  # a folder transformers and vLLM load
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import LossFn, TrainMetrics
from dockyard.core.rl import MaskedNLLLoss
from dockyard.train.prompts import PromptRenderer


class Trainer(Protocol):
    """What SFT calls: a :class:`~dockyard.core.interfaces.PolicyWorker` in this process
    (``dockyard sft``, the quickstart's warm start) or the Ray fleet's
    :class:`~dockyard.train.runtime.trainer.TrainerClient`."""

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics: ...

    def export_hf(self, path: str) -> str: ...


def encode_example(renderer: Any, example: dict[str, Any]) -> tuple[list[int], int]:
    """``(token ids, number of prompt tokens)`` for one chat example; ``renderer`` is a
    :class:`PromptRenderer` (or a bare tokenizer: its own chat template)."""
    r = PromptRenderer.wrap(renderer)
    msgs = example["messages"]
    if not msgs or msgs[-1]["role"] != "assistant":
        raise ValueError("an SFT example must end with an assistant message")
    p_ids = r.prompt_ids(r.messages(msgs[:-1]))
    a_ids = r.encode(msgs[-1]["content"])
    return p_ids + a_ids + [int(r.tokenizer.eos_token_id)], len(p_ids)


def collate(encoded: list[tuple[list[int], int]], pad_id: int = 0) -> Batch:
    """Right-padded batch; ``loss_mask`` on answer tokens."""
    B, T = len(encoded), max(len(ids) for ids, _ in encoded)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    for i, (seq, n_prompt) in enumerate(encoded):
        ids[i, : len(seq)] = seq
        att[i, : len(seq)] = True
        lm[i, n_prompt : len(seq)] = True
    z = np.zeros((B, T), dtype=np.float32)
    return Batch(input_ids=ids, attention_mask=att, loss_mask=lm, advantages=z, gen_logprobs=z)


def sft(
    worker: Trainer,
    tokenizer: Any,
    examples: list[dict[str, Any]],
    *,
    steps: int,
    batch_size: int,
    seed: int = 0,
    output_dir: str | Path | None = None,
    log: Any = None,
    loss_fn: Any = None,
) -> list[dict[str, float]]:
    """Train ``worker`` for ``steps`` steps of ``batch_size`` examples drawn
    in a seeded order (epochs reshuffled); optionally export an HF folder; returns metrics.
    ``tokenizer``: a :class:`PromptRenderer` (``PromptRenderer.from_config(cfg, tok)``) or a
    bare tokenizer (its own chat template). ``loss_fn``: a ``MaskedNLLLoss`` (None: token-level
    mean; ``MaskedNLLLoss.from_config(cfg.loss_fn)`` for ``loss_fn.type: nll``)."""
    if not examples:
        raise ValueError("no SFT examples")
    encoded = [encode_example(tokenizer, e) for e in examples]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(encoded))
    pos, history = 0, []
    loss_fn = loss_fn or MaskedNLLLoss()
    for step in range(steps):
        if pos + batch_size > len(order):
            order, pos = rng.permutation(len(encoded)), 0
        idx = order[pos : pos + batch_size]
        pos += batch_size
        t0 = time.perf_counter()
        m = worker.train_step(collate([encoded[i] for i in idx]), loss_fn)
        m = {k: float(v) for k, v in m.items() if isinstance(v, int | float | np.number)}
        m["time/step_s"] = time.perf_counter() - t0
        history.append(m)
        if log is not None:
            log.log(
                step + 1,
                {"sft/loss": m.get("loss", float("nan")), **{f"sft/{k}": v for k, v in m.items()}},
            )
    if output_dir is not None:
        worker.export_hf(str(output_dir))
    return history
