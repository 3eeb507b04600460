"""gen_project.py PARENT NAME SEED [reverse]: a project tree PARENT/NAME to back up.

Deterministic for a seed; ``reverse`` creates the same files in the opposite order (so
directory listing order differs) with fresh modification times."""

import os
import random
import sys

SKELETON = [
    ("README.md", 0o644),
    (".env", 0o600),
    (".env.example", 0o644),
    ("src/app.py", 0o644),
    ("src/app.pyc", 0o644),
    ("src/__pycache__/app.cpython-312.pyc", 0o644),
    ("src/util/strings.py", 0o644),
    ("src-old.txt", 0o644),
    ("src.txt", 0o644),
    ("scripts/deploy.sh", 0o755),
    ("scripts/-n.sh", 0o755),
    ("logs/app.log", 0o644),
    ("logs/README", 0o644),
    ("build.log.txt", 0o644),
    ("a.LOG", 0o644),
    ("node_modules/left-pad/index.js", 0o644),
    ("web/node_modules/x/y.js", 0o644),
    ("web/index.html", 0o644),
    ("node_modules.txt", 0o644),
    (".cache/blob", 0o644),
    ("data/.cache-info", 0o644),
    (".git/HEAD", 0o644),
    (".git/objects/ab/cdef", 0o444),
    ("vendor/lib/.git", 0o644),
    ("vendor/lib/lib.c", 0o640),
    ("x.log/y.txt", 0o644),
    ("docs/My File (1).md", 0o644),
    ("docs/r\u00e9sum\u00e9.txt", 0o644),
    ("data/empty.dat", 0o644),
    ("Zeta.md", 0o644),
    ("_under.md", 0o644),
    ("data/deep/er/still/ok.bin", 0o755),
]


def build(parent: str, name: str, seed: int, reverse: bool = False) -> None:
    rng = random.Random(seed)
    files = list(SKELETON)
    for i in range(rng.randint(8, 14)):
        d = rng.choice(["src", "src/util", "data", "web", "docs", "node_modules/pkg", "logs"])
        ext = rng.choice([".py", ".txt", ".log", ".json", ".pyc", ""])
        files.append((f"{d}/gen{seed}_{i}{ext}", rng.choice([0o644, 0o755])))
    contents = [
        b"" if p.endswith("empty.dat") else rng.randbytes(rng.randint(1, 3000)) for p, _ in files
    ]
    items = list(zip(files, contents, strict=True))
    for (rel, mode), data in reversed(items) if reverse else items:
        p = os.path.join(parent, name, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4)
