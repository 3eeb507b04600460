"""A registry of tools: JSON-schema-checked arguments, prompt rendering, result messages.

A tool is a name, a description, a JSON schema for its arguments and a handler
``handler(context, **arguments) -> str`` (sync or async). :meth:`ToolRegistry.execute` never
raises: an unknown tool, a schema violation or a handler exception comes back as a
``ToolOutcome`` with ``ok=False`` and an ``error_kind`` the environment counts and penalises.
Infrastructure failures are the one thing a handler may signal differently: raise
:class:`InfraError` — or let the sandbox client's :class:`SandboxUnavailable` (the service
failed or stayed saturated) or an httpx transport error through — and the outcome carries
``infra_error=True`` (the sample is masked).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema

from dockyard.envs.tools.hermes import ParsedCall, ParseError
from dockyard.sandbox.client import SandboxUnavailable

Handler = Callable[..., "str | Awaitable[str]"]


class InfraError(RuntimeError):
    """Raised by a tool handler when the infrastructure (not the model) failed."""


@dataclass
class Tool:
    """One tool. ``parameters`` is a JSON schema (type ``object``) for the arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler

    def __post_init__(self) -> None:
        if self.parameters.get("type") != "object":
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON schema with type 'object'"
            )
        jsonschema.Draft202012Validator.check_schema(self.parameters)
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    def spec(self) -> dict[str, Any]:
        """The OpenAI/Hermes function spec passed to chat templates as ``tools=[...]``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validation_error(self, arguments: dict[str, Any]) -> str | None:
        err = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if err is None:
            return None
        where = "/".join(str(p) for p in err.absolute_path) or "(arguments)"
        return f"{where}: {err.message}"


@dataclass
class ToolOutcome:
    """The result of one call. ``error_kind``: None, ``json``, ``not_object``, ``no_name``,
    ``bad_arguments``, ``truncated``, ``unknown_tool``, ``schema`` or ``handler``."""

    name: str
    content: str
    ok: bool = True
    error_kind: str | None = None
    infra_error: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def invalid(self) -> bool:
        """An invalid action by the model (not an infrastructure failure)."""
        return not self.ok and not self.infra_error

    def message(self) -> dict[str, str]:
        """The chat message that carries this result back (role ``tool``)."""
        return {"role": "tool", "name": self.name, "content": self.content}


class ToolRegistry:
    """Tools by name. Add one with :meth:`register` or the :meth:`tool` decorator."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or []:
            self.register(t)

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self, name: str, description: str, parameters: dict[str, Any]
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``@registry.tool("run", "Run a command", {...schema...})``."""

        def deco(fn: Handler) -> Handler:
            self.register(Tool(name, description, parameters, fn))
            return fn

        return deco

    def get(self, name: str) -> Tool:
        """The tool registered as ``name`` (KeyError if none): to reuse it in another registry."""
        return self._tools[name]

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self._tools.values()]

    def system_prompt(self, preamble: str = "") -> str:
        """A Hermes-style system prompt listing the tools (for templates without ``tools=``)."""
        listing = "\n".join(json.dumps(t.spec(), sort_keys=True) for t in self._tools.values())
        return (
            (preamble.rstrip() + "\n\n" if preamble else "")
            + "You may call tools. Available tools, as JSON function specs:\n<tools>\n"
            + listing
            + "\n</tools>\n\nTo call a tool, write one block per call:\n<tool_call>\n"
            + '{"name": <tool name>, "arguments": <JSON object>}\n</tool_call>'
        )

    async def execute(self, item: ParsedCall | ParseError, context: Any = None) -> ToolOutcome:
        """Run one parsed call; never raises (see the module docstring)."""
        if isinstance(item, ParseError):
            return ToolOutcome("invalid", f"error: {item.message}", ok=False, error_kind=item.kind)
        tool = self._tools.get(item.name)
        if tool is None:
            return ToolOutcome(
                item.name,
                f"error: unknown tool {item.name!r}; available: {', '.join(self._tools) or 'none'}",
                ok=False,
                error_kind="unknown_tool",
            )
        problem = tool.validation_error(item.arguments)
        if problem is not None:
            return ToolOutcome(
                item.name,
                f"error: invalid arguments for {item.name!r}: {problem}",
                ok=False,
                error_kind="schema",
            )
        try:
            result = tool.handler(context, **item.arguments)
            if inspect.isawaitable(result):
                result = await result
        except (InfraError, SandboxUnavailable, httpx.TransportError) as e:  # not the model's
            return ToolOutcome(
                item.name, f"error: infrastructure failure: {e}", ok=False, infra_error=True
            )
        except Exception as e:  # a handler bug or bad input it caught late: the model sees it
            return ToolOutcome(
                item.name, f"error: {type(e).__name__}: {e}", ok=False, error_kind="handler"
            )
        return ToolOutcome(item.name, str(result))


def truncate_middle(text: str, max_chars: int) -> str:
    """``text`` if at most ``max_chars`` long, else its head and tail (``max_chars // 2`` each)
    around a visible marker saying how many characters were cut."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[len(text) - half :]}"


def render_tool_responses(outcomes: list[ToolOutcome]) -> str:
    """Hermes text form of tool results, for a plain-text observation."""
    return "\n".join(f"<tool_response>\n{o.content}\n</tool_response>" for o in outcomes)
