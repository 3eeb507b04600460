"""No import circle between the sandbox package's modules (issue 19, item 5).

The source is read with :mod:`ast` (nothing is imported). An import counts wherever it is:
at module level, under ``if TYPE_CHECKING:``, inside a function, or as a
``"dockyard.sandbox.<module>"`` string. (Function length is checked repo-wide, in
``tests/workspace/test_habits.py``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import dockyard.sandbox

SRC = Path(dockyard.sandbox.__file__).resolve().parent
PKG = "dockyard.sandbox"


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(SRC.rglob("*.py")):
        parts = [PKG, *f.relative_to(SRC).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, f: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, in any form."""
    package = name if f.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value.partition(":")[0])
    # the package's own __init__ (which imports nothing) is not an edge
    return {m for m in found & known if m not in (name, PKG)}


def test_no_import_cycle_between_modules() -> None:
    mods = _modules()
    graph = {m: _imports(m, f, set(mods)) for m, f in mods.items()}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        for n in sorted(graph[m]):
            if n in path:
                cycles.append([*path[path.index(n) :], n])
            elif n not in done:
                visit(n, [*path, n])
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        if m not in done:
            visit(m, [m])
    assert cycles == []
