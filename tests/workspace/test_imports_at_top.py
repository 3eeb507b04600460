"""Imports at the top (issue 36 item 5): an import inside a function is there because a heavy or
optional dependency needs laziness, and says which, once, in a ``# lazy: <reason>`` comment on
the line above it (or at its end). Every other import is at module level, where a reader finds
the module's dependencies and the cycle test (``test_module_cycles.py``) sees them.

The source is read with :mod:`ast` (nothing is imported). ``if TYPE_CHECKING:`` blocks are
module level.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (REPO / "packages").iterdir() if (p / "src").is_dir())
_LAZY = re.compile(r"#\s*lazy:\s*\S")


def function_imports(path: Path) -> list[tuple[int, str]]:
    """(line, source) of each import statement inside a function of ``path``."""
    text = path.read_text()
    found: dict[int, str] = {}
    for fn in ast.walk(ast.parse(text, str(path))):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found[node.lineno] = ast.get_source_segment(text, node) or ""
    return sorted(found.items())


def unexplained(path: Path) -> list[str]:
    """The function-level imports of ``path`` with no ``# lazy:`` reason beside them: on the
    line above the run of consecutive imports it belongs to or at the end of that run's first
    line (one reason for a block), or at its own line's end."""
    lines = path.read_text().splitlines()
    imports = function_imports(path)
    end_of = {lineno: lineno + src.count("\n") for lineno, src in imports}  # 1-based, inclusive
    starts = {end: start for start, end in end_of.items()}
    out = []
    for lineno, src in imports:
        first = lineno
        while first - 1 in starts:  # the line above ends another import of the block
            first = starts[first - 1]
        here = [lines[first - 2] if first >= 2 else ""]  # above the block
        here += [lines[n - 1] for n in {first, end_of[first], lineno, end_of[lineno]}]
        if not any(_LAZY.search(line) for line in here):
            out.append(f"{path.relative_to(REPO)}:{lineno}: {src.splitlines()[0]}")
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_inside_a_function_says_why_it_is_lazy(package: str) -> None:
    bad = [
        u
        for f in sorted((REPO / "packages" / package / "src").rglob("*.py"))
        for u in unexplained(f)
    ]
    assert not bad, (
        f"{len(bad)} imports inside functions: move each to the top of its module, or (a heavy "
        "or optional dependency) say why on the line above with '# lazy: <reason>':\n"
        + "\n".join(bad)
    )


def test_the_check_finds_an_unexplained_import_and_accepts_a_reason(tmp_path: Path) -> None:
    f = REPO / "packages" / "tmp_probe.py"  # under REPO for relative_to; removed below
    f.write_text(
        "import os\n\n\ndef a():\n    import json\n    return json\n\n\n"
        "def b():\n    # lazy: torch is an optional extra\n    import torch\n    return torch\n\n\n"
        "def c():\n    from x import (  # lazy: x starts a server on import\n        y,\n    )\n"
        "    return y\n\n\n"
        "def d():\n    # lazy: both are optional\n    import p\n    from q import (\n        r,\n    )\n"
        "    import s\n\n    import t\n    return p, r, s, t\n"
    )
    try:
        found = [u.rsplit(":", 2)[1:] for u in unexplained(f)]
        assert found == [["5", " import json"], ["30", " import t"]]
    finally:
        f.unlink()
