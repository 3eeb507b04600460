"""Run /app/backup.sh on the pristine sample tree and on a held-out tree; score 6 checks each.

Per tree: member names and order; contents and type; permission bits; mtime/uid/gid; the
manifest text; byte-identical archive from a second run on the same files re-created in reverse
order, later, under another parent. Reward = checks passed / 12."""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, "/tests")
import gen_project  # pyright: ignore[reportMissingImports]  (in /tests at run time)

EXCL_DIRS = {"node_modules", ".cache", ".git"}
MTIME = 1704067200


def expected(src: str) -> list[str]:
    rels = []
    for d, dirs, files in os.walk(src):
        dirs[:] = [x for x in dirs if x not in EXCL_DIRS]
        for f in files:
            if f.endswith((".log", ".pyc")) or f == ".env":
                continue
            rels.append(os.path.relpath(os.path.join(d, f), src))
    name = os.path.basename(src)
    return sorted((f"{name}/{r}" for r in rels), key=lambda s: s.encode())


def run(src: str, out: str) -> bool:
    try:
        p = subprocess.run(
            ["/app/backup.sh", src, out],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            cwd="/tmp",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"backup.sh {src}: {e}", file=sys.stderr)
        return False
    if p.returncode != 0:
        print(f"backup.sh {src}: exit {p.returncode}: {p.stderr[-500:]!r}", file=sys.stderr)
    return (
        p.returncode == 0
        and os.path.isfile(f"{out}/backup.tar.gz")
        and os.path.isfile(f"{out}/MANIFEST.sha256")
    )


def score_tree(name: str, seed: int) -> int:
    base = f"/tmp/check-{name}"
    shutil.rmtree(base, ignore_errors=True)
    gen_project.build(f"{base}/a", name, seed)
    src = f"{base}/a/{name}"
    if not run(src, f"{base}/out1"):
        return 0
    want = expected(src)
    with open(f"{base}/out1/backup.tar.gz", "rb") as f:
        blob = f.read()
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            members = tar.getmembers()
            files = {m.name: tar.extractfile(m) for m in members if m.isfile()}
            datas = {n: f.read() for n, f in files.items() if f is not None}
    except (tarfile.TarError, OSError, EOFError) as e:
        print(f"{name}: unreadable archive: {e}", file=sys.stderr)
        return 0
    names = [m.name for m in members]
    checks = {}
    checks["names"] = names == want
    if not checks["names"]:
        print(f"{name}: members {names}\n  want {want}", file=sys.stderr)
    src_file = lambda n: os.path.join(f"{base}/a", n)  # noqa: E731
    checks["contents"] = all(m.isfile() for m in members) and all(
        os.path.isfile(src_file(n)) and Path(src_file(n)).read_bytes() == d
        for n, d in datas.items()
    )
    checks["modes"] = all(
        os.path.exists(src_file(m.name))
        and m.mode & 0o7777 == os.stat(src_file(m.name)).st_mode & 0o7777
        for m in members
    )
    checks["owner_time"] = bool(members) and all(
        m.mtime == MTIME and m.uid == 0 and m.gid == 0 for m in members
    )
    manifest = "".join(
        f"{hashlib.sha256(Path(src_file(n)).read_bytes()).hexdigest()}  {n}\n" for n in want
    )
    try:
        with open(f"{base}/out1/MANIFEST.sha256", encoding="utf-8") as f:
            checks["manifest"] = f.read() == manifest
    except (OSError, UnicodeDecodeError):
        checks["manifest"] = False
    time.sleep(1.2)
    gen_project.build(f"{base}/b/deeper", name, seed, reverse=True)
    again = run(f"{base}/b/deeper/{name}", f"{base}/out2")
    checks["reproducible"] = again and Path(f"{base}/out2/backup.tar.gz").read_bytes() == blob
    print(f"{name}: {checks}", file=sys.stderr)
    return sum(checks.values())


def main() -> float:
    if not (os.path.isfile("/app/backup.sh") and os.access("/app/backup.sh", os.X_OK)):
        print("no executable /app/backup.sh", file=sys.stderr)
        return 0.0
    return (score_tree("project", 7) + score_tree("webapp", 31)) / 12


print(main())
