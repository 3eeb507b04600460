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


@functools.lru_cache(maxsize=32)  # materialising a task set applies many mutations per file
def _candidates(text: str) -> tuple[tuple[Mutation, tuple[_Edit, ...]], ...]:
    tree = ast.parse(text)
    src = _Source(text)
    skip = _docstring_nodes(tree)
    out: list[tuple[Mutation, tuple[_Edit, ...]]] = []

    def add(kind: str, node: ast.AST, variant: str, desc: str, edits: list[_Edit | None]) -> None:
        if any(e is None for e in edits):
            return
        m = Mutation(kind, node.lineno, node.col_offset, variant, desc)  # type: ignore[attr-defined]
        out.append((m, tuple(e for e in edits if e is not None)))

    # nodes inside `if __name__ == "__main__":`, type annotations and decorators are skipped
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            tok = _CMP_TOKENS[type(node.ops[0])]
            for new in COMPARE_FLIPS[tok]:
                add("compare", node, new, f"'{tok}' -> '{new}'",
                    [_gap_edit(src, node.left, node.comparators[0], tok, new)])  # fmt: skip
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_TOKENS:
            tok = _BIN_TOKENS[type(node.op)]
            if any(
                isinstance(x, ast.JoinedStr)
                or (isinstance(x, ast.Constant) and isinstance(x.value, str | bytes))
                for x in (node.left, node.right)
            ):
                continue  # string concatenation / formatting, not arithmetic
            for new in BINOP_SWAPS[tok]:
                add("binop", node, new, f"'{tok}' -> '{new}'",
                    [_gap_edit(src, node.left, node.right, tok, new)])  # fmt: skip
        elif isinstance(node, ast.BoolOp):
            tok, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            add("boolop", node, new, f"'{tok}' -> '{new}'",
                [_gap_edit(src, node.values[0], node.values[1], tok, new)])  # fmt: skip
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            s, e = src.span(node)
            seg = src.text[s:e]
            if seg.startswith("not") and "\n" not in seg:
                add("not", node, "drop", "drop 'not'", [_Edit(s, e, seg[3:].lstrip())])
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and id(node) not in skip
            and 0 <= node.value <= 100
        ):
            s, e = src.span(node)
            if src.text[s:e] != str(node.value):
                continue  # hex, underscores...: leave alone
            for delta, variant in ((1, "+1"), (-1, "-1")):
                if node.value + delta >= 0:
                    add("off_by_one", node, variant, f"{node.value} -> {node.value + delta}",
                        [_Edit(s, e, str(node.value + delta))])  # fmt: skip
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            a, b = node.args[0], node.args[1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                continue
            (sa, ea), (sb, eb) = src.span(a), src.span(b)
            ta, tb = src.text[sa:ea], src.text[sb:eb]
            if ta == tb or "\n" in ta or "\n" in tb:
                continue
            add("swap_args", node, "0<->1", "swap the first two arguments",
                [_Edit(sa, ea, tb), _Edit(sb, eb, ta)])  # fmt: skip
        if isinstance(
            node,
            ast.FunctionDef
            | ast.AsyncFunctionDef
            | ast.For
            | ast.While
            | ast.If
            | ast.With
            | ast.Try,
        ):
            bodies = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            for body in bodies:
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
                        add(
                            "remove_branch",
                            stmt,
                            "drop",
                            "remove an 'if' block",
                            [_Edit(start, end, "")],
                        )
    out.sort(key=lambda me: me[0].key)
    return tuple(out)


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
