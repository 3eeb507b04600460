"""Reading what a unified diff touches, before anything is applied (threats 7, 8).

Only the headers are parsed here (``diff --git``, ``---``/``+++``, renames, modes); applying
is left to ``git apply`` running as the task's unprivileged uid. Every path must pass
:func:`dockyard.sandbox.paths.check_rel`; symlinks (mode 120000) and submodules (160000)
are refused outright.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dockyard.sandbox.paths import UnsafePath, check_rel


@dataclass
class PatchInfo:
    touched: list[str] = field(default_factory=list)  # every path read or written
    added: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


_GIT_HDR = re.compile(r"^diff --git (?:\"?a/)?(.+?)\"? (?:\"?b/)?(.+?)\"?$")


def _strip(p: str, prefix: str) -> str | None:
    p = p.split("\t", 1)[0].strip()
    if p.startswith('"') and p.endswith('"'):
        p = p[1:-1]
    if p == "/dev/null":
        return None
    if p.startswith(prefix):
        p = p[len(prefix) :]
    return p


def parse(patch: str) -> PatchInfo:
    """Return the paths ``patch`` touches; raise :class:`UnsafePath` on any unsafe one."""
    info = PatchInfo()
    seen: set[str] = set()

    def add(p: str | None) -> str | None:
        if p is None:
            return None
        rel = check_rel(p)
        if rel not in seen:
            seen.add(rel)
            info.touched.append(rel)
        return rel

    old: str | None = None
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            m = _GIT_HDR.match(line)
            if not m:
                raise UnsafePath(f"unparseable diff header {line!r}")
            add(m.group(1))
            add(m.group(2))
        elif line.startswith(
            ("new file mode", "new mode", "old mode", "deleted file mode", "index ")
        ):
            if re.search(r"\b1[26]0000\b", line):
                raise UnsafePath(
                    "patch creates a symlink or submodule (mode 120000/160000): refused"
                )
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            add(line.split(" ", 2)[2])
        elif line.startswith("--- "):
            old = add(_strip(line[4:], "a/"))
        elif line.startswith("+++ "):
            new = add(_strip(line[4:], "b/"))
            if old is None and new is not None:
                info.added.append(new)
            if new is None and old is not None:
                info.deleted.append(old)
        elif line.startswith("GIT binary patch"):
            continue
    return info
