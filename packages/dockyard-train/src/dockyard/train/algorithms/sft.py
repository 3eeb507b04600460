"""The SFT driver: masked NLL on chat data, on the same policy worker GRPO trains with.

An example is ``{"messages": [{"role": ..., "content": ...}, ...]}``; the last message is the
assistant's answer. The prompt (the messages before the first answer) is rendered as GRPO renders
its prompts (:class:`~dockyard.train.prompts.PromptRenderer`: the chat template or plain text,
the system prompt and prompt files); each answer's tokens (and its end-of-turn token) carry the
loss — a multi-turn demonstration (an agent's actions, the observations between them) trains
every action, tokenised as the rollout tokenises the episode. With ``"images"`` (TRL's
vision-language layout: one per ``{"type": "image"}`` content part) the example trains a
vision-language model on them, each placeholder expanded to the image's tokens:

    L = − Σ_bt m_bt · log π(x_bt | x_b,<t) / Σ_bt m_bt       (m: answer tokens)

    for step in range(steps):
        batch   = collate(next B examples)        # prompt via the renderer, answer + EOS
        metrics = worker.train_step(batch, MaskedNLLLoss())
        log(step, metrics)
    worker.export_hf(output_dir)                  # a folder transformers and vLLM load
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from dataclasses import dataclass, field
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


@dataclass
class Encoded:
    """One example's tokens: ``mask`` marks the tokens the loss is on (the answers and their
    end-of-turn token); ``images`` in the order of their (expanded) image tokens."""

    ids: list[int]
    mask: list[bool]
    images: list[np.ndarray] = field(default_factory=list)


class ImageTokens(Protocol):
    """A vision-language model's image tokens (:class:`dockyard.torch.vision.ImageInputs`):
    which token stands for an image and how many of it each image becomes."""

    image_token_id: int

    def token_counts(self, images: list[np.ndarray]) -> list[int]: ...


def encode_example(
    renderer: Any, example: dict[str, Any], image_tokens: ImageTokens | None = None
) -> Encoded:
    """One chat example's tokens; ``renderer`` is a :class:`PromptRenderer` (or a bare
    tokenizer: its own chat template).

    ``example["messages"]`` ends with an assistant message; every assistant message carries
    the loss (a multi-turn demonstration: each action, with the observations between them as
    context), rendered as a rollout renders that conversation: the prompt (system prompt and
    prompt file applied to the messages before the first answer), each answer's tokens and
    the end-of-turn token, then what the chat template puts between it and the next answer.
    ``example["images"]`` (arrays, PNG base64 strings or files, one per ``{"type": "image"}``
    part, in order) need ``image_tokens``: each image's placeholder is expanded to its tokens,
    as the engine expands it."""
    r = PromptRenderer.wrap(renderer)
    msgs = example["messages"]
    if not msgs or msgs[-1]["role"] != "assistant":
        raise ValueError("an SFT example must end with an assistant message")
    answers = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    head = r.messages(msgs[: answers[0]])
    conv = [*head, *msgs[answers[0] :]]
    answers = [i + len(head) - answers[0] for i in answers]
    eos = int(r.tokenizer.eos_token_id)
    ids = r.prompt_ids(conv[: answers[0]])
    mask = [False] * len(ids)
    for k, j in zip(answers, [*answers[1:], None], strict=True):
        reply = _text(conv[k]["content"])
        a_ids = [*r.encode(reply), eos]
        ids, mask = ids + a_ids, mask + [True] * len(a_ids)
        if j is None:
            break
        before = r.text(conv[:k]) + reply
        after = r.text(conv[:j])
        if r.plain or not after.startswith(before):
            raise ValueError(
                "a multi-turn SFT example needs a chat template whose rendering of a "
                "conversation begins with the rendering of each of its prefixes"
            )
        delta = after[len(before) :]
        end = r.tokenizer.eos_token or ""
        delta = delta[len(end) :] if end and delta.startswith(end) else delta
        d_ids = r.encode(delta)
        ids, mask = ids + d_ids, mask + [False] * len(d_ids)
    images = [load_image(im) for im in example.get("images") or []]
    if not images:
        return Encoded(ids, mask)
    if image_tokens is None:
        raise ValueError(
            "this SFT example has images: train a vision-language model (its image processor "
            "sets how many tokens each image becomes)"
        )
    return _expand(Encoded(ids, mask, images), image_tokens)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _expand(e: Encoded, image_tokens: ImageTokens) -> Encoded:
    """Each image placeholder token repeated as many times as its image has tokens."""
    pad = image_tokens.image_token_id
    places = [i for i, t in enumerate(e.ids) if t == pad]
    if len(places) != len(e.images):
        raise ValueError(
            f"{len(e.images)} images but {len(places)} image placeholders in the rendered "
            'example: one {"type": "image"} part per image'
        )
    ids, mask, start = [], [], 0
    for i, n in zip(places, image_tokens.token_counts(e.images), strict=True):
        ids += [*e.ids[start:i], *[pad] * n]
        mask += [*e.mask[start:i], *[False] * n]
        start = i + 1
    return Encoded([*ids, *e.ids[start:]], [*mask, *e.mask[start:]], e.images)


def load_image(image: Any) -> np.ndarray:
    """An ``[H, W, 3] uint8`` RGB array from an array, a PNG/JPEG base64 string or a file."""
    if isinstance(image, np.ndarray):
        return image
    # lazy: Pillow comes with the vision-language extras; text SFT never needs it
    from PIL import Image

    if isinstance(image, str) and not _is_file(image):
        try:
            raw = base64.b64decode(image, validate=True)
        except binascii.Error as e:
            raise ValueError(f"an SFT image is neither a file nor base64: {image[:60]!r}") from e
        src: Any = io.BytesIO(raw)
    else:
        src = image
    with Image.open(src) as im:
        return np.array(im.convert("RGB"))


def _is_file(s: str) -> bool:
    try:
        return len(s) < 4096 and Path(s).is_file()
    except OSError:  # a name too long for the file system: base64 data
        return False


def collate(encoded: list[Encoded] | list[tuple[list[int], int]], pad_id: int = 0) -> Batch:
    """Right-padded batch; ``loss_mask`` on answer tokens; the rows' images (if any) beside.
    A row is an :class:`Encoded` or ``(ids, number of prompt tokens)``."""
    rows = [
        e if isinstance(e, Encoded) else Encoded(e[0], [i >= e[1] for i in range(len(e[0]))])
        for e in encoded
    ]
    B, T = len(rows), max(len(e.ids) for e in rows)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    for i, e in enumerate(rows):
        ids[i, : len(e.ids)] = e.ids
        att[i, : len(e.ids)] = True
        lm[i, : len(e.ids)] = e.mask
    z = np.zeros((B, T), dtype=np.float32)
    images = [e.images for e in rows] if any(e.images for e in rows) else None
    return Batch(
        input_ids=ids, attention_mask=att, loss_mask=lm, advantages=z, gen_logprobs=z,
        images=images,
    )  # fmt: skip


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
    image_tokens: ImageTokens | None = None,
) -> list[dict[str, float]]:
    """Train ``worker`` for ``steps`` steps of ``batch_size`` examples drawn
    in a seeded order (epochs reshuffled); optionally export an HF folder; returns metrics.
    ``tokenizer``: a :class:`PromptRenderer` (``PromptRenderer.from_config(cfg, tok)``) or a
    bare tokenizer (its own chat template). ``loss_fn``: a ``MaskedNLLLoss`` (None: token-level
    mean; ``MaskedNLLLoss.from_config(cfg.loss_fn)`` for ``loss_fn.type: nll``).
    ``image_tokens``: a vision-language model's, for examples with images (encode_example)."""
    if not examples:
        raise ValueError("no SFT examples")
    encoded = [encode_example(tokenizer, e, image_tokens) for e in examples]
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
