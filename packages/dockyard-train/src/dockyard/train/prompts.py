"""From an environment's messages to prompt tokens: the one place prompts are rendered (GRPO
rollouts, multi-turn observations, SFT examples).

The keys it owns::

    policy.tokenizer.chat_template   null: the tokenizer's own chat template
                                     Jinja text, or a path to a .jinja file: replaces it
                                     plain: no template (base models): the messages' contents
                                       joined by blank lines; the generation prompt is nothing,
                                       an observation is appended as "\\n\\n" + its text
    data.prompt_file                 {prompt} (or NeMo-RL's {}) in it <- the user message
    data.system_prompt_file          its contents become the system message
    data.max_input_seq_length        tasks with longer prompts are dropped before training
                                     (null: max_total_sequence_length − max_new_tokens)

Both files lose their final newline (editors add one). The prompt file wraps the *last* user
message of the environment's prompt (earlier ones, few-shot examples, stay as they are).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dockyard.core.config.policy import PLAIN_TEMPLATE as PLAIN
from dockyard.core.config.policy import read_chat_template

SEPARATOR = "\n\n"  # between messages in plain mode

Messages = list[dict[str, Any]]  # content: text, or parts ({"type": "image"} ...)


class PromptConfig(BaseModel):
    """A :class:`PromptRenderer`'s own config: the tokenizer it renders with and the prompt keys
    of the run's config, read once by the driver
    (:func:`dockyard.train.algorithms.configs.prompt_config`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokenizer: str
    """The tokenizer's name or folder (``policy.tokenizer.name``, else ``policy.model_name``)."""
    chat_template: str | None = None
    """``policy.tokenizer.chat_template`` (null, Jinja text or a file, ``plain``)."""
    prompt_file: str | None = None
    """``data.prompt_file``."""
    system_prompt_file: str | None = None
    """``data.system_prompt_file``."""
    max_input_tokens: int | None = None
    """The longest prompt a task may have: ``data.max_input_seq_length``, else
    ``policy.max_total_sequence_length − policy.generation.max_new_tokens``."""


@dataclass
class PromptRenderer:
    """Renders messages to prompt ids (see the module docstring).

    Args:
        tokenizer: a Hugging Face tokenizer (``encode``, ``apply_chat_template``, ``eos_token``).
        chat_template: Jinja text replacing the tokenizer's template (None: its own).
        plain: no template at all (``policy.tokenizer.chat_template: plain``).
        prompt_template: ``data.prompt_file``'s text, with ``{prompt}`` or ``{}``.
        system_prompt: ``data.system_prompt_file``'s text.
        max_input_tokens: the longest prompt a task may have (None: any).
    """

    tokenizer: Any
    chat_template: str | None = None
    plain: bool = False
    prompt_template: str | None = None
    system_prompt: str | None = None
    max_input_tokens: int | None = None

    @classmethod
    def build(cls, pc: PromptConfig, tokenizer: Any) -> PromptRenderer:
        """From its own config. Raises FileNotFoundError for a template that is none of null /
        ``plain`` / Jinja text and names no file, ValueError for a tokenizer without a template
        when the config names none."""
        template, plain = _template(pc.chat_template)
        if template is None and not plain and getattr(tokenizer, "chat_template", "") is None:
            raise ValueError(
                f"the tokenizer of {pc.tokenizer} has no chat template: set "
                "policy.tokenizer.chat_template to a Jinja template, a .jinja file, or 'plain' "
                "(the messages' contents joined by blank lines, for base models)"
            )
        prompt = _read(pc.prompt_file, "data.prompt_file")
        if prompt is not None and "{prompt}" not in prompt and "{}" not in prompt:
            raise ValueError(
                f"data.prompt_file {pc.prompt_file} has no {{prompt}} (or {{}}) where the "
                "environment's user message goes"
            )
        return cls(
            tokenizer,
            chat_template=template,
            plain=plain,
            prompt_template=prompt,
            system_prompt=_read(pc.system_prompt_file, "data.system_prompt_file"),
            max_input_tokens=pc.max_input_tokens,
        )

    @classmethod
    def wrap(cls, renderer_or_tokenizer: Any) -> PromptRenderer:
        """A renderer as it is; a bare tokenizer as a renderer with its own chat template."""
        if isinstance(renderer_or_tokenizer, PromptRenderer):
            return renderer_or_tokenizer
        return cls(renderer_or_tokenizer)

    # ------------------------------------------------------------ rendering
    def messages(self, task_messages: Messages) -> Messages:
        """The environment's messages with the system prompt and the prompt file applied."""
        out: Messages = [dict(m) for m in task_messages]
        if self.system_prompt is not None:
            out = [{"role": "system", "content": self.system_prompt}] + [
                m for m in out if m.get("role") != "system"
            ]
        if self.prompt_template is not None:
            users = [i for i, m in enumerate(out) if m.get("role") == "user"]
            if users:
                m = out[users[-1]]
                content = m.get("content", "")
                if isinstance(content, str):
                    m["content"] = _fill(self.prompt_template, content)
                else:  # content parts (a screen beside the text): the first text part
                    parts = [dict(c) for c in content]
                    text = next((c for c in parts if c.get("type") == "text"), None)
                    if text is not None:
                        text["text"] = _fill(self.prompt_template, text.get("text", ""))
                    m["content"] = parts
        return out

    def text(self, messages: Messages, add_generation_prompt: bool = True) -> str:
        """The prompt text of ``messages`` (with the generation prompt, unless plain)."""
        if self.plain:
            return SEPARATOR.join(m.get("content", "") for m in messages)
        kwargs = {} if self.chat_template is None else {"chat_template": self.chat_template}
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Token ids of the prompt of ``messages`` (already :meth:`messages`-applied)."""
        return self.encode(self.text(messages))

    def observation_ids(
        self,
        messages: Messages,
        reply: str,
        observation: str,
        eos_seen: bool,
        tool_messages: Messages | None = None,
        images: int = 0,
    ) -> list[int]:
        """Tokens between the policy's reply to ``messages`` and its next turn: with a chat
        template, the end of the assistant turn (minus the EOS the engine already produced),
        the observation and the generation prompt; plain, a blank line and the observation.

        The observation is ``tool_messages`` (role ``tool``: tool results, rendered the way the
        template renders tool responses, e.g. Qwen2's ``<tool_response>`` inside a user turn)
        where the environment gives them, else ``observation`` as a user turn, after its
        ``images`` (a vision-language policy's screens: one image placeholder each)."""
        if self.plain:
            _no_images(images)
            return self.encode(SEPARATOR + observation)
        before = self.text(messages)
        conv = [*messages, {"role": "assistant", "content": reply}]
        added = self.observation_messages(observation, tool_messages, images)
        after = self.text([*conv, *added])
        delta = after[len(before) + len(reply) :]
        eos = self.tokenizer.eos_token or ""
        if eos_seen and eos and delta.startswith(eos):
            delta = delta[len(eos) :]
        return self.encode(delta)

    @staticmethod
    def observation_messages(
        observation: str, tool_messages: Messages | None, images: int = 0
    ) -> Messages:
        """The messages an observation adds to the conversation (see :meth:`observation_ids`)."""
        if tool_messages and not images:
            return [dict(m) for m in tool_messages]
        if tool_messages:
            raise ValueError("an observation with both tool messages and images is not rendered")
        if images:
            return [{"role": "user", "content": image_content(observation, images)}]
        return [{"role": "user", "content": observation}]

    def with_first_observation(self, messages: Messages, observation: str, images: int) -> Messages:
        """``messages`` with the screen the policy sees before its first turn added to the last
        user message (its images, then its text)."""
        if self.plain:
            _no_images(images)
        out = [dict(m) for m in messages]
        users = [i for i, m in enumerate(out) if m.get("role") == "user"]
        if not users:
            return [*out, *self.observation_messages(observation, None, images)]
        m = out[users[-1]]
        text = m.get("content", "")
        if self.plain or not images:
            m["content"] = f"{text}{SEPARATOR}{observation}" if observation else text
        else:
            m["content"] = [{"type": "text", "text": text}, *image_content(observation, images)]
        return out

    # ------------------------------------------------------------ filtering
    def lengths(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` (one batched call on a Hugging Face tokenizer)."""
        if not texts or not callable(self.tokenizer):
            return [len(self.encode(t)) for t in texts]
        batch: Any = self.tokenizer(texts, add_special_tokens=False)
        return [len(ids) for ids in batch["input_ids"]]

    def fits(self, messages: Messages) -> bool:
        """Whether the prompt of ``messages`` is at most ``max_input_tokens`` long."""
        return self.max_input_tokens is None or len(self.prompt_ids(messages)) <= (
            self.max_input_tokens
        )

    def filter_tasks(
        self, env: Any, tasks: Iterable[dict[str, Any]], what: str = "training"
    ) -> list[dict[str, Any]]:
        """The tasks whose prompt (``env.prompt(task)``, rendered) fits; says how many were
        dropped (one line on stderr) and raises ValueError when none is left."""
        tasks = list(tasks)
        if self.max_input_tokens is None:
            return tasks
        lengths = self.lengths([self.text(self.messages(env.prompt(t))) for t in tasks])
        kept = [t for t, n in zip(tasks, lengths, strict=True) if n <= self.max_input_tokens]
        dropped = len(tasks) - len(kept)
        if tasks and not kept:
            raise ValueError(
                f"all {len(tasks)} {what} tasks have prompts longer than {self.max_input_tokens} "
                "tokens: raise data.max_input_seq_length (or policy.max_total_sequence_length "
                "− policy.generation.max_new_tokens), or shorten the prompts"
            )
        if dropped:
            print(
                f"dockyard: dropped {dropped} of {len(tasks)} {what} tasks whose prompt is "
                f"longer than {self.max_input_tokens} tokens (data.max_input_seq_length)",
                file=sys.stderr,
                flush=True,
            )
        return kept


def image_content(text: str, images: int) -> list[dict[str, str]]:
    """A message's content of ``images`` image placeholders then ``text`` (the chat template's
    ``{"type": "image"}`` parts: a vision-language model's template renders each as its image
    token)."""
    parts: list[dict[str, str]] = [{"type": "image"} for _ in range(images)]
    return [*parts, {"type": "text", "text": text}] if text else parts


def _no_images(images: int) -> None:
    if images:
        raise ValueError(
            "the environment shows images, but the prompts are plain text "
            "(policy.tokenizer.chat_template: plain): use the vision-language model's chat template"
        )


def _fill(template: str, prompt: str) -> str:
    """``{prompt}`` (or ``{}``) in ``template`` replaced by ``prompt`` (other braces kept)."""
    key = "{prompt}" if "{prompt}" in template else "{}"
    return template.replace(key, prompt)


def _read(path: str | None, key: str) -> str | None:
    if path is None:
        return None
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{key}: {p} is not a file")
    text = p.read_text()
    return text[:-1] if text.endswith("\n") else text


def _template(value: str | None) -> tuple[str | None, bool]:
    """``(Jinja text or None, plain)`` for ``policy.tokenizer.chat_template`` (null, ``plain``,
    Jinja text, or a path to a ``.jinja`` file: :func:`read_chat_template`)."""
    text = read_chat_template(value)
    return (None, True) if text == PLAIN else (text, False)
