"""The Hermes tool-call parser and the tool registry: partial, multiple and malformed calls."""

from __future__ import annotations

import asyncio

import pytest

from dockyard.envs.tools import ParsedCall, ParseError, Tool, ToolRegistry, parse_tool_calls
from dockyard.envs.tools.registry import InfraError
from dockyard.sandbox.client import SandboxUnavailable


def test_single_call_and_prose():
    turn = parse_tool_calls(
        'Let me look.\n<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n</tool_call>'
    )
    assert turn.content == "Let me look."
    assert [(c.name, c.arguments) for c in turn.calls] == [("run", {"command": "ls"})]
    assert turn.errors == []


def test_multiple_calls_in_order_with_a_bad_one_between():
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> mid '
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
    )
    turn = parse_tool_calls(text)
    kinds = [type(i).__name__ for i in turn.items]
    assert kinds == ["ParsedCall", "ParseError", "ParsedCall"]
    assert turn.items[1].kind == "json"
    assert turn.calls[1].arguments == {"y": 2}  # arguments given as a JSON string are decoded
    assert turn.content == "mid"


def test_truncated_final_call_is_an_error_not_dropped():
    turn = parse_tool_calls('ok <tool_call>{"name": "run", "argum')
    assert len(turn.items) == 1
    assert isinstance(turn.items[0], ParseError)
    assert turn.items[0].kind == "truncated"
    # cut inside the opening tag itself
    turn = parse_tool_calls("thinking... <tool_ca")
    assert [e.kind for e in turn.errors] == ["truncated"]
    assert turn.content == "thinking..."


def test_missing_close_tag_before_next_call_keeps_a_complete_call():
    turn = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b"}</tool_call>'
    )
    assert [c.name for c in turn.calls] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("[1, 2]", "not_object"),
        ('{"arguments": {}}', "no_name"),
        ('{"name": "  ", "arguments": {}}', "no_name"),
        ('{"name": "a", "arguments": [1]}', "bad_arguments"),
        ('{"name": "a", "arguments": "nope"}', "bad_arguments"),
        ("", "json"),
    ],
)
def test_malformed_calls_become_typed_errors(body, kind):
    turn = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert [e.kind for e in turn.errors] == [kind]


def test_code_fences_and_trailing_commas_are_tolerated():
    turn = parse_tool_calls(
        '<tool_call>\n```json\n{"name": "a", "arguments": {"k": [1, 2,],},}\n```\n</tool_call>'
    )
    assert turn.calls == [ParsedCall("a", {"k": [1, 2]}, turn.calls[0].raw)]


def test_raw_control_characters_inside_strings_are_tolerated():
    """Grammar-constrained decoding (xgrammar's JSON strings) admits U+0000-U+001F raw inside a
    string; strict JSON wants them escaped. The call means the same either way."""
    turn = parse_tool_calls(
        '<tool_call>\n{"name": "run", "arguments": {"command": "a\x12b\tc"}}\n</tool_call>'
    )
    assert [c.arguments for c in turn.calls] == [{"command": "a\x12b\tc"}]
    assert turn.errors == []


def test_no_calls_and_stray_close_tag():
    turn = parse_tool_calls("just text </tool_call> here")
    assert turn.items == []
    assert turn.content == "just text  here"


def test_parser_never_raises_on_garbage():
    import random

    rng = random.Random(0)
    alphabet = [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        '"a"',
        ",",
        '"arguments"',
        "[",
        "]",
        "x",
        " ",
        "\\",
        '"',
    ]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        turn = parse_tool_calls(text)
        assert all(isinstance(i, ParsedCall | ParseError) for i in turn.items)


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool("add", "Add two integers", {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    })  # fmt: skip
    def add(ctx, a: int, b: int) -> str:
        return str(a + b)

    async def boom(ctx) -> str:
        raise RuntimeError("handler exploded")

    async def down(ctx) -> str:
        raise InfraError("sandbox unreachable")

    async def saturated(ctx) -> str:  # what the sandbox client raises for a 5xx or a late 429
        raise SandboxUnavailable("sandbox service could not serve GET /files (HTTP 503)")

    reg.register(Tool("boom", "always fails", {"type": "object", "properties": {}}, boom))
    reg.register(Tool("down", "infra fails", {"type": "object", "properties": {}}, down))
    reg.register(Tool("busy", "service fails", {"type": "object", "properties": {}}, saturated))
    return reg


def test_registry_validates_and_executes():
    reg = _registry()
    run = lambda text: [asyncio.run(reg.execute(i)) for i in parse_tool_calls(text).items]  # noqa: E731
    ok = run('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')[0]
    assert ok.ok
    assert ok.content == "5"
    assert ok.message() == {"role": "tool", "name": "add", "content": "5"}
    bad = run('<tool_call>{"name": "add", "arguments": {"a": "2", "b": 3}}</tool_call>')[0]
    assert not bad.ok
    assert bad.error_kind == "schema"
    assert "a" in bad.content
    assert bad.invalid
    extra = run('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1, "c": 0}}</tool_call>')[0]
    assert extra.error_kind == "schema"
    unknown = run('<tool_call>{"name": "mul", "arguments": {}}</tool_call>')[0]
    assert unknown.error_kind == "unknown_tool"
    assert "add" in unknown.content
    crash = run('<tool_call>{"name": "boom", "arguments": {}}</tool_call>')[0]
    assert crash.error_kind == "handler"
    assert "exploded" in crash.content
    infra = run('<tool_call>{"name": "down", "arguments": {}}</tool_call>')[0]
    assert infra.infra_error
    assert not infra.invalid
    busy = run('<tool_call>{"name": "busy", "arguments": {}}</tool_call>')[0]
    assert busy.infra_error  # masked, never shown to the model as its own error
    assert not busy.invalid
    parse_err = run("<tool_call>{oops</tool_call>")[0]
    assert parse_err.error_kind == "json"
    assert parse_err.invalid


def test_registry_rejects_bad_schemas_and_duplicates():
    reg = _registry()
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Tool("add", "dup", {"type": "object"}, lambda ctx: ""))
    with pytest.raises(ValueError, match="type 'object'"):
        Tool("x", "bad", {"type": "string"}, lambda ctx: "")
    prompt = reg.system_prompt("You are an agent.")
    assert "<tools>" in prompt
    assert '"name": "add"' in prompt
    assert prompt.startswith("You are an agent.")
    assert [s["function"]["name"] for s in reg.specs()] == ["add", "boom", "down", "busy"]
