"""Parse Hermes-style tool calls out of a model turn.

The format (Hermes / Qwen chat templates)::

    some prose
    <tool_call>
    {"name": "run", "arguments": {"command": "ls"}}
    </tool_call>

A turn may hold several calls. Models under RL also produce broken ones, and the parser must
never raise on them. What it handles:

* several calls in one turn, in order;
* a final call cut off by the token budget (``<tool_call>{"name": ...`` without the closing
  tag): reported as a ``truncated`` error, not silently dropped;
* malformed JSON, a JSON value that is not an object, a missing/blank ``name``, ``arguments``
  that are not an object (a JSON *string* holding an object, as some templates emit, is decoded);
* code fences inside the tags (```` ```json ... ``` ````) and trailing commas are tolerated;
* text outside the tags is kept as ``content``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


@dataclass
class ParsedCall:
    """One well-formed call: ``name`` and its ``arguments`` object (not yet schema-checked)."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass
class ParseError:
    """A call that could not be parsed. ``kind``: ``json``, ``not_object``, ``no_name``,
    ``bad_arguments`` or ``truncated``; ``message`` is shown back to the model."""

    kind: str
    message: str
    raw: str = ""


@dataclass
class ParsedTurn:
    """A model turn split into prose and calls (``items`` keeps calls and errors in order)."""

    content: str
    items: list[ParsedCall | ParseError] = field(default_factory=list)

    @property
    def calls(self) -> list[ParsedCall]:
        return [i for i in self.items if isinstance(i, ParsedCall)]

    @property
    def errors(self) -> list[ParseError]:
        return [i for i in self.items if isinstance(i, ParseError)]


def _loads_lenient(text: str) -> Any:
    """JSON with a code fence, trailing commas, or raw control characters inside strings (the
    same characters escaped are valid; grammar-constrained decoding admits them raw)."""
    body = text.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        return json.loads(body, strict=False)
    except json.JSONDecodeError:
        return json.loads(_TRAILING_COMMA.sub(r"\1", body), strict=False)


def _parse_one(raw: str) -> ParsedCall | ParseError:
    try:
        obj = _loads_lenient(raw)
    except (json.JSONDecodeError, RecursionError) as e:
        return ParseError("json", f"tool call is not valid JSON: {e}", raw)
    if not isinstance(obj, dict):
        return ParseError(
            "not_object",
            f'tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got {type(obj).__name__}',
            raw,
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError("no_name", 'tool call needs a non-empty string "name"', raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = _loads_lenient(args) if args.strip() else {}
        except json.JSONDecodeError:
            return ParseError(
                "bad_arguments", '"arguments" is a string that is not a JSON object', raw
            )
    if not isinstance(args, dict):
        return ParseError(
            "bad_arguments", f'"arguments" must be an object, got {type(args).__name__}', raw
        )
    return ParsedCall(name.strip(), args, raw)


def parse_tool_calls(text: str) -> ParsedTurn:
    """Split ``text`` into prose and tool calls; never raises.

    Returns:
        ``ParsedTurn(content, items)``: ``content`` is the text outside the tags (stripped),
        ``items`` the calls and errors in the order they appear.
    """
    items: list[ParsedCall | ParseError] = []
    prose: list[str] = []
    pos = 0
    while True:
        start = text.find(OPEN_TAG, pos)
        if start < 0:
            tail = text[pos:]
            # a stray closing tag with no opener is prose, but a dangling "<tool_call" prefix
            # at the very end (budget cut mid-tag) is a truncated call
            if tail.rstrip().endswith(tuple(OPEN_TAG[:k] for k in range(5, len(OPEN_TAG)))):
                cut = tail.rstrip().rfind("<tool")
                prose.append(tail[:cut])
                items.append(
                    ParseError("truncated", "tool call cut off before it closed", tail[cut:])
                )
            else:
                prose.append(tail)
            break
        prose.append(text[pos:start])
        body_start = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, body_start)
        nxt = text.find(OPEN_TAG, body_start)
        if end < 0 or (0 <= nxt < end):
            # unclosed: either the turn was cut off, or a new call starts before a close tag
            stop = nxt if nxt >= 0 else len(text)
            raw = text[body_start:stop]
            parsed = _parse_one(raw) if nxt >= 0 else ParseError("truncated", "", raw)
            if isinstance(parsed, ParsedCall) or nxt < 0:
                # a complete JSON object followed by another <tool_call> is accepted (missing
                # close tag only); a cut-off tail is an error
                if nxt < 0:
                    parsed = ParseError(
                        "truncated", "tool call cut off before </tool_call> (token budget?)", raw
                    )
                items.append(parsed)
            else:
                items.append(ParseError("truncated", "tool call not closed with </tool_call>", raw))
            pos = stop
            continue
        items.append(_parse_one(text[body_start:end]))
        pos = end + len(CLOSE_TAG)
    content = "".join(prose).replace(CLOSE_TAG, "").strip()
    return ParsedTurn(content=content, items=items)
