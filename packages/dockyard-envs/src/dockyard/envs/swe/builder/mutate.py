"""The AST mutation engine: enumerate and apply small, realistic bugs to Python source.

Every mutation is a *minimal text edit* located through the AST, so the gold patch (the reverse
diff) touches only the tokens that changed. A mutation is identified by
``(kind, line, col, variant)`` — enough to regenerate it from the pristine file without storing
any of its source.

Kinds:

==================  ==========================================================================
``compare``         flip a comparison: ``<``→``<=``/``>``, ``==``→``!=``, ``in``→``not in``,
                    ``is``→``is not`` (and back)
``binop``           swap an arithmetic / bitwise operator: ``+``↔``-``, ``*``→``//``, ``|``↔``&`` …
``boolop``          ``and``↔``or``
``not``             drop a ``not``
``off_by_one``      an integer literal ``n`` → ``n+1`` or ``n-1``
``remove_branch``   delete an ``if`` block that has no ``else`` (a guard or special case)
``swap_args``       swap the first two positional arguments of a call
==================  ==========================================================================
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass

COMPARE_FLIPS: dict[str, list[str]] = {
    "<": ["<=", ">"],
    "<=": ["<", ">="],
    ">": [">=", "<"],
    ">=": [">", "<="],
    "==": ["!="],
    "!=": ["=="],
    "in": ["not in"],
    "not in": ["in"],
    "is": ["is not"],
    "is not": ["is"],
}
BINOP_SWAPS: dict[str, list[str]] = {
    "+": ["-"],
    "-": ["+"],
    "*": ["//", "+"],
    "/": ["*"],
    "//": ["/", "*"],
    "%": ["//"],
    "|": ["&"],
    "&": ["|"],
    "<<": [">>"],
    ">>": ["<<"],
}
_CMP_TOKENS = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}  # fmt: skip
_BIN_TOKENS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.BitOr: "|", ast.BitAnd: "&", ast.LShift: "<<", ast.RShift: ">>",
}  # fmt: skip
KINDS = ("compare", "binop", "boolop", "not", "off_by_one", "remove_branch", "swap_args")


@dataclass(frozen=True)
class Mutation:
    """One applicable mutation. ``line`` is 1-based, ``col`` a 0-based character offset."""

    kind: str
    line: int
    col: int
    variant: str
    description: str = ""

    @property
    def key(self) -> tuple[str, int, int, str]:
        return (self.kind, self.line, self.col, self.variant)

    def spec(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class _Edit:
    start: int  # absolute character offsets into the source
    end: int
    text: str


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self._line_starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self._line_starts.append(i + 1)
        self._lines = text.splitlines(keepends=True)

    def offset(self, line: int, col_utf8: int) -> int:
        # ast columns are UTF-8 byte offsets; convert within the line
        raw = self._lines[line - 1].encode("utf-8")[:col_utf8].decode("utf-8", errors="replace")
        return self._line_starts[line - 1] + len(raw)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )


def _gap_edit(src: _Source, left: ast.AST, right: ast.AST, token: str, new: str) -> _Edit | None:
    """Replace ``token`` in the text between two operands (``a < b``, ``(a) + (b)``)."""
    _, gap_start = src.span(left)
    gap_end, _ = src.span(right)
    gap = src.text[gap_start:gap_end]
    core = gap.strip().strip("()").strip()
    if " ".join(core.split()) != token or "\n" in gap or "#" in gap:
        return None
    i = gap.index(core)
    return _Edit(gap_start + i, gap_start + i + len(core), new)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


_Found = tuple[str, ast.expr | ast.stmt, str, str, list[_Edit | None]]
"""``(kind, node, variant, description, edits)``; a ``None`` edit: the text does not allow it."""


@functools.lru_cache(maxsize=32)  # materialising a task set applies many mutations per file
def _candidates(text: str) -> tuple[tuple[Mutation, tuple[_Edit, ...]], ...]:
    """Every mutation of ``text`` with the edits that make it, sorted by key."""
    tree = ast.parse(text)
    src = _Source(text)
    skip = _docstring_nodes(tree)
    out: list[tuple[Mutation, tuple[_Edit, ...]]] = []
    # every node is a candidate but docstring constants: those under `if __name__ ==
    # "__main__":`, in annotations and in decorators too (a mutation no test fails makes no task)
    for node in ast.walk(tree):
        found = itertools.chain(_expression_mutations(src, node, skip), _branch_removals(src, node))
        for kind, at, variant, desc, edits in found:
            if any(e is None for e in edits):
                continue
            m = Mutation(kind, at.lineno, at.col_offset, variant, desc)
            out.append((m, tuple(e for e in edits if e is not None)))
    out.sort(key=lambda me: me[0].key)
    return tuple(out)


def _expression_mutations(src: _Source, node: ast.AST, skip: set[int]) -> Iterator[_Found]:
    """The mutations of one expression node, by its type (``skip``: docstring constants)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        yield from _compare_flips(src, node)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_TOKENS:
        yield from _binop_swaps(src, node)
    elif isinstance(node, ast.BoolOp):
        tok, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        yield ("boolop", node, new, f"'{tok}' -> '{new}'",
               [_gap_edit(src, node.values[0], node.values[1], tok, new)])  # fmt: skip
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        s, e = src.span(node)
        seg = src.text[s:e]
        if seg.startswith("not") and "\n" not in seg:
            yield ("not", node, "drop", "drop 'not'", [_Edit(s, e, seg[3:].lstrip())])
    elif (
        isinstance(node, ast.Constant)
        and type(node.value) is int
        and id(node) not in skip
        and 0 <= node.value <= 100
    ):
        yield from _off_by_ones(src, node, node.value)
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        yield from _arg_swaps(src, node)


def _compare_flips(src: _Source, node: ast.Compare) -> Iterator[_Found]:
    """``compare``: the single comparison operator replaced by each of its flips."""
    tok = _CMP_TOKENS[type(node.ops[0])]
    for new in COMPARE_FLIPS[tok]:
        yield ("compare", node, new, f"'{tok}' -> '{new}'",
               [_gap_edit(src, node.left, node.comparators[0], tok, new)])  # fmt: skip


def _binop_swaps(src: _Source, node: ast.BinOp) -> Iterator[_Found]:
    """``binop``: the arithmetic operator swapped, unless the operation is on strings."""
    tok = _BIN_TOKENS[type(node.op)]
    if any(
        isinstance(x, ast.JoinedStr)
        or (isinstance(x, ast.Constant) and isinstance(x.value, str | bytes))
        for x in (node.left, node.right)
    ):
        return  # string concatenation / formatting, not arithmetic
    for new in BINOP_SWAPS[tok]:
        yield ("binop", node, new, f"'{tok}' -> '{new}'",
               [_gap_edit(src, node.left, node.right, tok, new)])  # fmt: skip


def _off_by_ones(src: _Source, node: ast.Constant, value: int) -> Iterator[_Found]:
    """``off_by_one``: the decimal literal ``value`` plus and minus one (never below zero)."""
    s, e = src.span(node)
    if src.text[s:e] != str(value):
        return  # hex, underscores...: leave alone
    for delta, variant in ((1, "+1"), (-1, "-1")):
        if value + delta >= 0:
            yield ("off_by_one", node, variant, f"{value} -> {value + delta}",
                   [_Edit(s, e, str(value + delta))])  # fmt: skip


def _arg_swaps(src: _Source, node: ast.Call) -> Iterator[_Found]:
    """``swap_args``: the first two call arguments swapped (one-line, distinct, unstarred)."""
    a, b = node.args[0], node.args[1]
    if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
        return
    (sa, ea), (sb, eb) = src.span(a), src.span(b)
    ta, tb = src.text[sa:ea], src.text[sb:eb]
    if ta == tb or "\n" in ta or "\n" in tb:
        return
    yield ("swap_args", node, "0<->1", "swap the first two arguments",
           [_Edit(sa, ea, tb), _Edit(sb, eb, ta)])  # fmt: skip


def _branch_removals(src: _Source, node: ast.AST) -> Iterator[_Found]:
    """``remove_branch``: each lone-line ``if`` without ``else`` in a block of 2+ statements."""
    if not isinstance(
        node,
        ast.FunctionDef | ast.AsyncFunctionDef | ast.For | ast.While | ast.If | ast.With | ast.Try,
    ):
        return
    for body in [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]:
        if len(body) < 2:
            continue
        for stmt in body:
            if isinstance(stmt, ast.If) and not stmt.orelse:
                start = src.offset(stmt.lineno, 0)
                end = src.offset(stmt.end_lineno, stmt.end_col_offset)  # type: ignore[arg-type]
                if src.text[start : src.offset(stmt.lineno, stmt.col_offset)].strip():
                    continue  # not alone on its line
                if end < len(src.text) and src.text[end] == "\n":
                    end += 1
                yield ("remove_branch", stmt, "drop", "remove an 'if' block",
                       [_Edit(start, end, "")])  # fmt: skip


def enumerate_mutations(text: str) -> list[Mutation]:
    """All mutations applicable to ``text`` (a Python module), in a deterministic order."""
    return [m for m, _ in _candidates(text)]


def apply_mutation(text: str, mutation: Mutation | dict[str, object]) -> str:
    """Apply ``mutation`` to the pristine ``text``.

    Raises:
        KeyError: the mutation does not exist in this text (the file changed?).
    """
    key = (
        mutation.key
        if isinstance(mutation, Mutation)
        else (mutation["kind"], mutation["line"], mutation["col"], mutation["variant"])
    )
    for m, edits in _candidates(text):
        if m.key == key:
            out = text
            for e in sorted(edits, key=lambda e: e.start, reverse=True):
                out = out[: e.start] + e.text + out[e.end :]
            ast.parse(out)  # a mutation always yields valid Python
            return out
    raise KeyError(f"mutation {key} does not apply to this source (was the file changed?)")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
