"""The tool-call protocol: Hermes-style ``<tool_call>{json}</tool_call>`` parsing and a registry.

* :mod:`dockyard.envs.tools.hermes` parses a model turn into calls, surviving partial, multiple
  and malformed calls (a bad call becomes a :class:`ParseError` entry, never an exception).
* :mod:`dockyard.envs.tools.registry` holds tools with JSON-schema argument validation, renders
  their descriptions into a system prompt and their results back as ``tool`` messages.
"""

from dockyard.envs.tools.hermes import ParsedCall, ParsedTurn, ParseError, parse_tool_calls
from dockyard.envs.tools.registry import Tool, ToolOutcome, ToolRegistry

__all__ = [
    "ParseError",
    "ParsedCall",
    "ParsedTurn",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "parse_tool_calls",
]
