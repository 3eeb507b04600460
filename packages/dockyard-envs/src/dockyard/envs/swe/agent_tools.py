"""The repository agent's tools, run in its sandbox session.

* ``bash(command, timeout_s?)`` — the terminal environment's shell tool, reused as is;
* ``str_replace_editor(command, path, ...)`` — SWE-agent's editor (:mod:`dockyard.envs.swe.editor`):
  ``view`` (a file with numbered lines, a line range, or a directory two levels deep),
  ``create``, ``str_replace``, ``insert``, ``undo_edit``;
* ``search(pattern, path?, include?)`` — ``grep -rnI`` over the tree (regex, ``.git`` skipped);
* ``find_file(name, path?)`` — files whose name matches a glob;
* ``submit()`` — end the episode; the held-out tests judge the workspace diff.

Paths are relative to the repository root (``/workspace/...`` is accepted too). An editor or
search error (no unique match, a missing file, a bad line range) is an answer the model reads,
counted in ``state["tool_errors"]``, not an invalid action: invalid actions are calls the
protocol rejects (bad JSON, unknown tools, arguments the schema refuses), which the environment
penalises.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from dockyard.envs.swe import editor
from dockyard.envs.terminal.env import build_tools as build_terminal_tools
from dockyard.envs.tools import Tool, ToolRegistry
from dockyard.envs.tools.registry import InfraError, truncate_middle
from dockyard.sandbox.client import SandboxRequestError
from dockyard.sandbox.models import Verdict
from dockyard.sandbox.toolchain import WORKSPACE

MAX_MATCHES = 100
TOOL_NAMES = ("bash", "str_replace_editor", "search", "find_file", "submit")


def _rel(path: str) -> str:
    p = path.strip()
    if p == WORKSPACE or p == WORKSPACE + "/":
        return "."
    if p.startswith(WORKSPACE + "/"):
        p = p[len(WORKSPACE) + 1 :]
    return p or "."


def _error(state: dict[str, Any], message: str) -> str:
    state["tool_errors"] = state.get("tool_errors", 0) + 1
    return f"error: {message}"


async def _exec(client: Any, state: dict[str, Any], command: str, timeout_s: float = 20.0) -> Any:
    res = await client.exec(state["session_id"], command, timeout_s=timeout_s)
    if res.verdict == Verdict.infra_error:
        raise InfraError(res.stderr[:300])
    return res


async def _read(client: Any, state: dict[str, Any], path: str) -> str | None:
    try:
        data = await client.get_file(state["session_id"], path)
    except SandboxRequestError:
        return None
    except httpx.HTTPError as e:
        raise InfraError(repr(e)) from e
    return data.decode("utf-8", errors="replace")


async def _write(client: Any, state: dict[str, Any], path: str, text: str) -> str | None:
    """None on success, else the service's reason."""
    try:
        await client.put_file(state["session_id"], path, text)
    except SandboxRequestError as e:
        return str(e.detail)
    except httpx.HTTPError as e:
        raise InfraError(repr(e)) from e
    return None


_EDITOR_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": {"type": "string", "minLength": 1},
        "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "file_text": {"type": "string"},
        "old_str": {"type": "string"},
        "new_str": {"type": "string"},
        "insert_line": {"type": "integer", "minimum": 0},
    },
    "required": ["command", "path"],
    "additionalProperties": False,
}


def build_agent_tools(
    pool_of: Callable[[dict[str, Any]], Any],
    max_output_chars: int,
    only: Sequence[str] | None = None,
) -> ToolRegistry:
    """The tools (module docstring), or those named in ``only`` (``submit`` always); handlers
    get the episode ``state`` as context.

    Raises ValueError for a name that is not one of :data:`TOOL_NAMES`."""
    unknown = sorted(set(only or ()) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown agent tools {unknown}; choose from {', '.join(TOOL_NAMES)}")
    terminal = build_terminal_tools(pool_of, max_output_chars)
    reg = ToolRegistry()
    reg.register(_bash_tool(terminal.get("run")))

    def cap(text: str) -> str:
        return truncate_middle(text, max_output_chars)

    _add_editor_tool(reg, pool_of, cap)
    _add_search_tools(reg, pool_of, cap)
    reg.register(terminal.get("submit"))
    if only is None:
        return reg
    return ToolRegistry([reg.get(n) for n in TOOL_NAMES if n in only or n == "submit"])


def _bash_tool(shell: Tool) -> Tool:
    """The terminal environment's shell tool, as ``bash`` at the repository root."""
    return Tool(
        "bash",
        "Run a shell command at the repository root; returns the exit code and output. "
        "Use it to run tests or scripts.",
        shell.parameters,
        shell.handler,
    )


def _add_editor_tool(
    reg: ToolRegistry, pool_of: Callable[[dict[str, Any]], Any], cap: Callable[[str], str]
) -> None:
    """``str_replace_editor`` (view, create, str_replace, insert, undo_edit) on ``reg``."""

    @reg.tool(
        "str_replace_editor",
        "View, create and edit files. `view`: a file with numbered lines (`view_range` [start, "
        "end], end -1 = to the end) or a directory; `create`: a new file with `file_text`; "
        "`str_replace`: replace `old_str` (must occur exactly once) with `new_str`; `insert`: "
        "`new_str` after line `insert_line` (0 = top); `undo_edit`: revert the last edit of `path`.",
        _EDITOR_SCHEMA,
    )
    async def str_replace_editor(state: dict[str, Any], command: str, path: str, **kw: Any) -> str:
        client = pool_of(state)
        rel = _rel(path)
        history: dict[str, list[str]] = state.setdefault("edit_history", {})
        if command == "undo_edit":
            return await _undo_edit(client, state, history, rel, path)
        text = await _read(client, state, rel)
        if command == "view" and text is None:
            listing = await _list_directory(client, state, rel)
            if listing is not None:
                return cap(f"Files and directories up to 2 levels deep in {path}:\n{listing}")
        if command == "create":
            return await _create_file(client, state, rel, path, text is not None, kw)
        if text is None:
            return _error(state, f"The path {path} does not exist or is not a readable text file.")
        try:
            if command == "view":
                return cap(editor.view(path, text, kw.get("view_range")))
            edited = _edited_text(state, command, path, text, kw)
        except editor.EditorError as e:
            return _error(state, str(e))
        if isinstance(edited, str):
            return edited
        new_text, msg = edited
        problem = await _write(client, state, rel, new_text)
        if problem:
            return _error(state, problem)
        history.setdefault(rel, []).append(text)
        return cap(msg)


async def _undo_edit(
    client: Any, state: dict[str, Any], history: dict[str, list[str]], rel: str, path: str
) -> str:
    """Restore the text ``rel`` had before its last edit (``history`` holds those texts)."""
    if not history.get(rel):
        return _error(state, f"no edit of {path} to undo")
    problem = await _write(client, state, rel, history[rel].pop())
    return _error(state, problem) if problem else f"Last edit to {path} undone."


async def _list_directory(client: Any, state: dict[str, Any], rel: str) -> str | None:
    """The files under directory ``rel``, two levels deep; ``None`` if it is not a directory."""
    q = shlex.quote(rel)
    res = await _exec(
        client, state,
        f"if [ -d {q} ]; then find {q} -maxdepth 2 -not -path '*/.*' | sort | head -n 400; "
        "else exit 3; fi",
    )  # fmt: skip
    return res.stdout if res.exit_code == 0 else None


async def _create_file(
    client: Any, state: dict[str, Any], rel: str, path: str, exists: bool, kw: dict[str, Any]
) -> str:
    """Write ``kw["file_text"]`` to a new file; an existing one is refused, never overwritten."""
    if exists:
        return _error(
            state, f"File already exists at: {path}. Cannot overwrite files using command "
            "`create`; edit it with `str_replace` or `insert`."
        )  # fmt: skip
    if "file_text" not in kw:
        return _error(state, "`create` needs `file_text`")
    problem = await _write(client, state, rel, kw["file_text"])
    return _error(state, problem) if problem else f"File created successfully at: {path}"


def _edited_text(
    state: dict[str, Any], command: str, path: str, text: str, kw: dict[str, Any]
) -> tuple[str, str] | str:
    """``(new text, message)`` of ``str_replace``/``insert``, or the missing-argument error."""
    if command == "str_replace":
        if "old_str" not in kw:
            return _error(state, "`str_replace` needs `old_str` (and `new_str`)")
        return editor.str_replace(path, text, kw["old_str"], kw.get("new_str", ""))
    # insert (the schema admits nothing else)
    if "insert_line" not in kw or "new_str" not in kw:
        return _error(state, "`insert` needs `insert_line` and `new_str`")
    return editor.insert(path, text, kw["insert_line"], kw["new_str"])


def _add_search_tools(
    reg: ToolRegistry, pool_of: Callable[[dict[str, Any]], Any], cap: Callable[[str], str]
) -> None:
    """``search`` (grep) and ``find_file`` (find), registered on ``reg``."""

    @reg.tool(
        "search",
        "Search file contents for a regular expression (grep -rnI); shows file:line:text.",
        {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string", "minLength": 1},
                "include": {
                    "type": "string",
                    "minLength": 1,
                    "description": "a file glob, e.g. *.py",
                },
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    )
    async def search(
        state: dict[str, Any], pattern: str, path: str = ".", include: str = ""
    ) -> str:
        inc = f" --include={shlex.quote(include)}" if include else ""
        cmd = (
            f"grep -rnIE --exclude-dir=.git{inc} -e {shlex.quote(pattern)} -- "
            f"{shlex.quote(_rel(path))} | head -n {MAX_MATCHES + 1}"
        )
        res = await _exec(pool_of(state), state, cmd)
        lines = [ln for ln in res.stdout.splitlines() if ln]
        if not lines:
            if res.stderr.strip():
                return _error(state, res.stderr.strip()[:500])
            return f"No matches for {pattern!r} in {path}."
        more = (
            f"\n[more than {MAX_MATCHES} matches: narrow the search]"
            if len(lines) > MAX_MATCHES
            else ""
        )
        return cap("\n".join(lines[:MAX_MATCHES]) + more)

    @reg.tool(
        "find_file",
        "Find files whose name matches a glob (e.g. '*.py', 'test_*.py') under a directory.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "path": {"type": "string", "minLength": 1},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    )
    async def find_file(state: dict[str, Any], name: str, path: str = ".") -> str:
        cmd = (
            f"find {shlex.quote(_rel(path))} -name .git -prune -o -type f -name "
            f"{shlex.quote(name)} -print | sort | head -n {MAX_MATCHES + 1}"
        )
        res = await _exec(pool_of(state), state, cmd)
        lines = [ln for ln in res.stdout.splitlines() if ln]
        if not lines:
            if res.stderr.strip():
                return _error(state, res.stderr.strip()[:500])
            return f"No files named {name!r} under {path}."
        return cap("\n".join(lines[:MAX_MATCHES]))
