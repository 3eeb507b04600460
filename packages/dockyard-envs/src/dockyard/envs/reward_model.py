"""Reward model: a response scored by a trained reward model (``env.<name>.type: reward_model``).

The model is a Hugging Face sequence-classification folder with one label: what ``dockyard rm``
exports, or any such reward model (TRL's ``RewardTrainer`` writes the same kind). A task is
``{"prompt": ...}``, a string (one user message) or a list of chat messages, the same field
the preference pairs have (a pairs file serves as GRPO's ``data.train_path``: the other fields
are ignored). The response is scored as the reward model was trained: the prompt rendered
with the folder's tokenizer and its chat template (generation prompt added; a tokenizer
without one joins the messages' contents with blank lines), then the response's tokens and
the end-of-sequence token; the head's output at that last token, times ``scale`` plus
``shift``, is ``reward/reward_model``.

Options (``env.<name>.options``):

==================  ======================================================================
``model_path``      the reward model's folder (required)
``batch_size``      responses scored in one forward pass (16); concurrent ``score`` calls
                    are gathered into batches
``max_length``      tokens kept per scored row, the last ones (null: all)
``device``          ``cpu``, ``cuda`` or ``auto`` (``cuda`` when available)
``scale``           multiplies the raw score (1.0)
``shift``           added after scaling (0.0)
==================  ======================================================================

torch and transformers are imported when the model is first used (not when this module is
imported): they come with ``pip install "dockyard-torch"``. One model per environment;
forward passes run in a worker thread, one at a time (a lock), so the event loop keeps
collecting the next responses meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from pathlib import Path
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.rewards import RewardConfig

REWARD_MODEL = "reward/reward_model"
_INSTALL = 'the reward_model environment needs torch and transformers: pip install "dockyard-torch"'


def check_reward_model_folder(path: str | Path) -> dict[str, Any]:
    """The ``config.json`` of ``path`` if it is a one-label sequence-classification model;
    ValueError (naming the key to fix) otherwise. Reads JSON only: no torch."""
    folder = Path(path).expanduser()
    where = f"env options model_path {str(path)!r}"
    if not (folder / "config.json").is_file():
        raise ValueError(f"{where}: no Hugging Face model folder there (no config.json)")
    config = json.loads((folder / "config.json").read_text())
    arch = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in arch):
        raise ValueError(
            f"{where} is not a sequence-classification model (architectures: "
            f"{', '.join(map(str, arch)) or 'none'}): train one with `dockyard rm` and give "
            "the folder it exports"
        )
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels", 2))
    if labels != 1:
        raise ValueError(f"{where} has {labels} labels: a reward model has one (a scalar score)")
    return config


def _messages(task: dict[str, Any]) -> list[dict[str, str]]:
    prompt = task.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    raise ValueError(
        "a reward_model task needs a 'prompt': a string or a list of chat messages "
        f"(task fields: {', '.join(sorted(task)) or 'none'})"
    )


class RewardModelEnvironment(BaseEnvironment):
    """Single-turn: a response's reward is a reward model's score (module docstring)."""

    name = "reward_model"

    def __init__(
        self,
        model_path: str,
        batch_size: int = 16,
        max_length: int | None = None,
        device: str = "cpu",
        scale: float = 1.0,
        shift: float = 0.0,
        reward: RewardConfig | None = None,
    ) -> None:
        super().__init__(reward)
        check_reward_model_folder(model_path)
        if batch_size < 1:
            raise ValueError(f"env options batch_size must be at least 1, got {batch_size}")
        if device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"env options device {device!r}: expected cpu, cuda or auto")
        self.model_path = str(Path(model_path).expanduser())
        self.batch_size, self.max_length, self.device = batch_size, max_length, device
        self.scale, self.shift = float(scale), float(shift)
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()  # one forward pass at a time, from any thread
        # responses waiting for a batch, per running loop (a future waits on its own loop)
        self._pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._flushes: set[asyncio.Task[None]] = set()  # held until done (asyncio keeps none)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        try:
            check_reward_model_folder(options["model_path"])
        except (ValueError, OSError) as e:
            return [str(e)]
        return []

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return _messages(task)

    # ------------------------------------------------------------ the model
    def _load(self) -> Any:
        try:
            # lazy: torch is not a dependency of dockyard-envs (it comes with dockyard-torch)
            import torch

            # lazy: transformers is not a dependency of dockyard-envs (it comes with dockyard-torch)
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        model = AutoModelForSequenceClassification.from_pretrained(self.model_path)
        if model.config.pad_token_id is None:  # the head finds each row's last token by it
            tok = self._tokenizer  # as the trainer sets it: the pad token, else end-of-sequence
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            model.config.pad_token_id = 0 if pad is None else int(pad)
        self._model = model.to(device).eval()
        return self._model

    def _ids(self, task: dict[str, Any], response: str) -> list[int]:
        """Prompt, response and end-of-sequence token ids, as the reward model was trained."""
        tok, messages = self._tokenizer, _messages(task)
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = "\n\n".join(m["content"] for m in messages)
        ids = tok.encode(text, add_special_tokens=False) + tok.encode(
            response, add_special_tokens=False
        )
        if tok.eos_token_id is not None:
            ids.append(int(tok.eos_token_id))
        return ids[-self.max_length :] if self.max_length else ids

    def score_texts(self, items: list[tuple[dict[str, Any], str]]) -> list[float]:
        """The rewards of ``(task, response)`` pairs, ``batch_size`` per forward pass
        (thread-safe; blocking)."""
        with self._lock:
            model = self._model if self._model is not None else self._load()
            # lazy: torch is not a dependency of dockyard-envs; _load has checked it is there
            import torch

            out: list[float] = []
            pad = int(model.config.pad_token_id)
            for j in range(0, len(items), self.batch_size):
                rows = [self._ids(t, r) for t, r in items[j : j + self.batch_size]]
                width = max(map(len, rows))
                ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for i, row in enumerate(rows):
                    ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
                with torch.no_grad():
                    logits = model(
                        input_ids=ids.to(model.device), attention_mask=mask.to(model.device)
                    ).logits
                out += [self.scale * float(v) + self.shift for v in logits[:, 0].float().cpu()]
            return out

    # ------------------------------------------------------------ scoring
    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        _messages(task)  # a task without a prompt fails alone, not its whole batch
        loop = asyncio.get_running_loop()
        future: asyncio.Future[float] = loop.create_future()
        queue = self._pending.setdefault(loop, [])
        queue.append((task, response, future))
        if len(queue) == 1:  # the first waiting response schedules the batch
            flush = loop.create_task(self._flush(loop))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        value = await future
        return self._shape(StepResult(rewards={REWARD_MODEL: value}), response)

    async def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        await asyncio.sleep(0)  # let the responses arriving together join the batch
        while queue := self._pending.get(loop):
            batch, self._pending[loop] = queue[: self.batch_size], queue[self.batch_size :]
            try:
                values = await asyncio.to_thread(self.score_texts, [(t, r) for t, r, _ in batch])
            except Exception as e:  # every waiting call sees the failure
                for *_, f in batch:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (*_, f), v in zip(batch, values, strict=True):
                if not f.done():
                    f.set_result(v)
