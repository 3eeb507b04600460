"""No import circle between the modules of any package (issue 19 item 5 for the sandbox,
issue 36 item 2 for all): the package graph has no cycle (test_architecture.py), and neither
has the module graph inside each package.

The source is read with :mod:`ast` (nothing is imported). An import counts wherever it is:
at module level, under ``if TYPE_CHECKING:``, inside a function, or as a
``"dockyard.<package>.<module>"`` string. (Function length is checked repo-wide, in
``tests/workspace/test_habits.py``.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_IMPORT_STRING = re.compile(r"dockyard(\.\w+)+(:[\w.]+)?")
PACKAGES = sorted(p.name.removeprefix("dockyard-") for p in (REPO / "packages").iterdir())


def _modules(pkg: str) -> dict[str, Path]:
    src = REPO / "packages" / f"dockyard-{pkg}" / "src" / "dockyard" / pkg
    out = {}
    for f in sorted(src.rglob("*.py")):
        parts = [f"dockyard.{pkg}", *f.relative_to(src).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, f: Path, known: set[str], pkg_name: str) -> set[str]:
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
        elif (  # an import string: "dockyard.x.y" or "dockyard.x.y:attr"
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _IMPORT_STRING.fullmatch(node.value)
        ):
            found.add(node.value.partition(":")[0])
    # a module's own packages are loaded before it whatever it imports: not an edge
    ancestors = {name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1)}
    return {m for m in found & known if m != name and m not in ancestors | {pkg_name}}


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_import_cycle_between_modules(pkg: str) -> None:
    mods = _modules(pkg)
    graph = {m: _imports(m, f, set(mods), f"dockyard.{pkg}") for m, f in mods.items()}
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
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)
