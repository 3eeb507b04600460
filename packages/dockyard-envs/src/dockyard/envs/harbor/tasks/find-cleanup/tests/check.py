"""Rebuild the pristine tree, apply the rules, compare with /app/data and /app/archive.

Reward = (affected files handled right) / (affected files), halved if anything else in
/app/data changed or /app/archive holds something that should not be there."""

import os
import sys

sys.path.insert(0, "/tests")
import gen_tree  # pyright: ignore[reportMissingImports]  (in /tests at run time)

CUT = gen_tree.CUT.timestamp()


def snapshot(root: str) -> dict[str, tuple]:
    """relative path -> ('f', bytes, mtime) | ('l', target) | ('d',) without following links."""
    out: dict[str, tuple] = {}
    if not os.path.isdir(root):
        return out
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d",)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read(), int(st.st_mtime))
    return out


def main() -> float:
    gen_tree.build("/tmp/pristine")
    before = snapshot("/tmp/pristine/data")
    delete, move = set(), set()
    for rel, e in before.items():
        if e[0] != "f":
            continue
        if os.path.basename(rel).endswith(".tmp") or len(e[1]) == 0:
            delete.add(rel)
        elif len(e[1]) > 50000 and e[2] < CUT and not rel.startswith("keep/"):
            move.add(rel)
    data, archive = snapshot("/app/data"), snapshot("/app/archive")
    ok = 0
    for rel in sorted(delete | move):
        gone = rel not in data
        right = gone and (archive.get(rel) == before[rel] if rel in move else rel not in archive)
        ok += right
        if not right:
            print(f"wrong: {rel!r} ({'move' if rel in move else 'delete'})", file=sys.stderr)
    collateral = [r for r, e in before.items() if r not in delete | move and data.get(r) != e]
    collateral += [r for r in data if r not in before]
    collateral += [r for r, e in archive.items() if e[0] != "d" and r not in move]
    if collateral:
        print(f"collateral changes: {sorted(set(collateral))[:10]}", file=sys.stderr)
    print(f"{ok}/{len(delete | move)} affected files right", file=sys.stderr)
    return ok / len(delete | move) * (0.5 if collateral else 1.0)


print(main())
