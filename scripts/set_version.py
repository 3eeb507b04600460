"""Set one version for every package of the workspace, and the sibling pins, in lockstep.

    python scripts/set_version.py 0.2.0

The root pyproject.toml's `project.version` is the single source of truth; this rewrites it and
every `packages/*/pyproject.toml` (their `version` and their `dockyard-*==X` pins).
tests/workspace/test_layout.py fails when they drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def set_version(version: str) -> list[Path]:
    if not re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc|\.dev|\.post)?\d*", version):
        raise SystemExit(f"not a PEP 440 release version: {version!r}")
    changed = []
    for path in [ROOT / "pyproject.toml", *sorted(ROOT.glob("packages/*/pyproject.toml"))]:
        text = path.read_text()
        new = re.sub(r'(?m)^version = "[^"]+"', f'version = "{version}"', text, count=1)
        new = re.sub(r'("dockyard-[a-z0-9]+(?:\[[^\]]*\])?==)[^";\s]+', rf"\g<1>{version}", new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for p in set_version(sys.argv[1]):
        print(f"updated {p.relative_to(ROOT)}")
