"""OpenAI chat messages <-> the engine's tokens: prompts (token-in-token-out where the history
allows), and replies with ``tool_calls`` parsed from the model's text.

Prompt of a request (:meth:`ChatSession.prompt`):

* **token-in-token-out** when the request's messages are the previous request's messages, then
  the assistant reply this endpoint returned (same content, same tool calls), then new messages
  (tool results, a user turn): the prompt is the previous prompt + the engine's completion
  tokens + the tokens of the new messages, where those are the text the chat template puts
  after the assistant turn (its end-of-turn marker, minus the EOS the engine already sampled)
  and the new messages with the generation prompt — :meth:`PromptRenderer.observation_ids`'s
  rule, with the request's ``tools``. This is how verl's agent loop and SkyRL's generator keep
  multi-turn rollouts on the engine's own tokens; it keeps the extension property of
  :mod:`dockyard.train.endpoint.recorder` by construction.
* otherwise the chat template renders the whole request (``tools`` passed to it) and the text is
  tokenised; the recorder then checks the extension property on the ids and starts a new sample
  where it breaks.

Replies: the completion text is parsed for Hermes ``<tool_call>{"name", "arguments"}</tool_call>``
blocks (:func:`dockyard.envs.tools.parse_tool_calls`, the chat templates of Qwen2.5/Qwen3 and
Hermes models); each becomes an OpenAI ``tool_calls`` entry (``arguments`` a JSON string),
the prose outside the tags the ``content``. Without ``tools`` in the request, or when no call
parses, the whole text is the ``content``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.tools import parse_tool_calls

Messages = list[dict[str, Any]]


def _arguments(a: Any) -> Any:
    """Tool-call arguments as an object where the JSON string holds one (the chat templates'
    convention: Hugging Face templates render ``arguments`` with ``tojson``)."""
    if isinstance(a, str):
        try:
            return json.loads(a)
        except json.JSONDecodeError:
            return a
    return a


def template_messages(messages: Messages) -> Messages:
    """OpenAI messages as chat templates expect them: ``content`` a string (text parts joined,
    None as ""), ``tool_calls[i].function.arguments`` an object."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):  # content parts: keep the text ones
            c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
        msg: dict[str, Any] = {"role": m["role"], "content": c or ""}
        for k in ("name", "tool_call_id"):
            if m.get(k) is not None:
                msg[k] = m[k]
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "type": "function",
                    "id": tc.get("id"),
                    "function": {
                        "name": tc["function"]["name"],
                        "arguments": _arguments(tc["function"].get("arguments", {})),
                    },
                }
                for tc in m["tool_calls"]
            ]
        out.append(msg)
    return out


def normalized(m: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for a message to count as unchanged: role, text, tool calls (name and
    decoded arguments), tool-call id. Ids the client invents and null fields do not matter."""
    (t,) = template_messages([m])
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
        for c in t.get("tool_calls", [])
    )
    return (t["role"], t["content"], calls, t.get("tool_call_id"))


@dataclass
class Reply:
    """One completion as the scaffold sees it."""

    message: dict[str, Any]
    finish_reason: str


def reply_message(text: str, finish: str, tools_offered: bool) -> Reply:
    """The OpenAI assistant message of completion ``text`` (see the module docstring)."""
    parsed = parse_tool_calls(text) if tools_offered else None
    if parsed is None or not parsed.calls:
        return Reply({"role": "assistant", "content": text}, finish)
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for c in parsed.calls
    ]
    content = parsed.content.strip() or None
    return Reply({"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls")


@dataclass
class ChatSession:
    """One episode's chat rendering state.

    Args:
        renderer: the run's :class:`~dockyard.train.prompts.PromptRenderer` (its tokenizer and
            chat template).
    """

    renderer: Any
    prev: list[tuple[Any, ...]] = field(default_factory=list)  # last request, normalised
    prev_messages: Messages = field(default_factory=list)  # last request, template form
    reply: tuple[Any, ...] | None = None  # the assistant message returned, normalised
    raw: str = ""  # its completion text
    eos_seen: bool = False
    tools: Any = None

    def text(self, messages: Messages, tools: Any, add_generation_prompt: bool = True) -> str:
        r = self.renderer
        kwargs: dict[str, Any] = (
            {} if r.chat_template is None else {"chat_template": r.chat_template}
        )
        if tools:
            kwargs["tools"] = tools
        return r.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
        )

    def _continuation(self, new: Messages, tools: Any) -> list[int] | None:
        """Tokens after the previous completion for the ``new`` messages, or None where the
        template does not render the assistant turn's text verbatim."""
        before = self.text(self.prev_messages, tools)
        conv = [*self.prev_messages, {"role": "assistant", "content": self.raw}]
        mid = self.text(conv, tools, add_generation_prompt=False)
        after = self.text([*conv, *new], tools)
        if not mid.startswith(before + self.raw) or not after.startswith(mid):
            return None
        closing = mid[len(before) + len(self.raw) :]
        eos = self.renderer.tokenizer.eos_token or ""
        if self.eos_seen and eos and closing.startswith(eos):
            closing = closing[len(eos) :]
        return self.renderer.encode(closing + after[len(mid) :])

    def prompt(self, messages: Messages, tools: Any, context: list[int]) -> tuple[list[int], bool]:
        """``(prompt ids, reused)`` for a request; ``context`` is the previous turn's prompt +
        completion ids (reused: the prompt extends it token for token)."""
        msgs = template_messages(messages)
        norm = [normalized(m) for m in messages]
        n = len(self.prev)
        if (
            self.reply is not None
            and context
            and tools == self.tools
            and len(norm) > n + 1
            and norm[:n] == self.prev
            and norm[n] == self.reply
        ):
            cont = self._continuation(msgs[n + 1 :], tools)
            if cont is not None:
                return [*context, *cont], True
        return self.renderer.encode(self.text(msgs, tools)), False

    def remember(
        self, messages: Messages, tools: Any, reply: Reply, raw: str, eos_seen: bool
    ) -> None:
        """Record the request just served and the reply returned (for the next request)."""
        self.prev = [normalized(m) for m in messages]
        self.prev_messages = template_messages(messages)
        self.reply = normalized(reply.message)
        self.raw, self.eos_seen, self.tools = raw, eos_seen, tools
