"""gen_tree.py ROOT: build ROOT/data (deterministic names, contents and mtimes; the verifier
rebuilds the same pristine tree to recompute what the cleanup must do)."""

import datetime as dt
import os
import random
import sys

rng = random.Random(1234)
OLD = dt.datetime(2021, 6, 1, tzinfo=dt.UTC)
NEW = dt.datetime(2024, 2, 1, tzinfo=dt.UTC)
CUT = dt.datetime(2023, 1, 1, tzinfo=dt.UTC)
SEC = dt.timedelta(seconds=1)

# (relative path, size, mtime)
FILES = [
    ("report 2021.csv", 80_000, OLD),
    ("-rf.tmp", 10, NEW),
    ("--help", 120_000, OLD),
    ("line\nbreak.log", 70_000, OLD),
    ("line\nbreak.tmp", 5, OLD),
    ("notes.TMP", 90_000, NEW),
    (".hidden.tmp", 3, NEW),
    (".hidden-big.bin", 66_000, OLD),
    ("dir.tmp/inner.txt", 100, OLD),
    ("keep/huge-old.bin", 200_000, OLD),
    ("keep/sub/old big", 75_000, OLD),
    ("keep/x.tmp", 20, OLD),
    ("keep/.gitkeep", 0, OLD),
    ("keeper/big-old.bin", 150_000, OLD),
    ("empty file", 0, NEW),
    ("exactly50000.bin", 50_000, OLD),
    ("50001.bin", 50_001, OLD),
    ("cutoff-exact.bin", 99_000, CUT),
    ("cutoff-minus-1s.bin", 99_000, CUT - SEC),
    ("*.bak", 64_000, OLD),
    ("[a-z].dat", 64_000, OLD),
    ("café.tmp", 7, NEW),
    ("with space/old big.iso", 180_000, OLD),
    ("with space/new big.iso", 180_000, NEW),
    ("a.tmp.txt", 10, OLD),
    ("tmp", 55_555, OLD),
    ("deep/a/b/c/d/old.bin", 51_000, OLD),
    ("deep/a/b/c/d/.tmp", 0, OLD),
    ('quote\'s "file".bin', 77_000, OLD),
]
for i in range(40):
    d = rng.choice(["logs", "logs/2022", "cache", "media/raw", "media", "src", "src/old"])
    ext = rng.choice([".log", ".tmp", ".bin", ".txt", ".tmp", ""])
    size = rng.choice([0, 12, 4096, 49_999, 50_001, 61_000, 130_000])
    when = OLD + dt.timedelta(days=rng.randint(0, 1000), seconds=rng.randint(0, 86399))
    FILES.append((f"{d}/f{i:02d}{ext}", size, when))


def build(root: str) -> None:
    data = os.path.join(root, "data")
    for rel, size, when in FILES:
        p = os.path.join(data, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(rng.randbytes(size))
        os.utime(p, (when.timestamp(), when.timestamp()))
    os.makedirs(os.path.join(data, "empty dir.tmp"), exist_ok=True)
    os.symlink("report 2021.csv", os.path.join(data, "latest.tmp"))
    os.symlink("../--help", os.path.join(data, "keep", "help-link"))


if __name__ == "__main__":
    build(sys.argv[1])
