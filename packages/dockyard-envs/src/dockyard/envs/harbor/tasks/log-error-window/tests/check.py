"""Recompute the 3 UTC minutes with most ERROR records from pristine logs; compare answer.txt."""

import collections
import gzip
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

counts = collections.Counter()
for name, data in gen.build().items():
    text = (gzip.decompress(data) if name.endswith(".gz") else data).decode()
    for line in text.split("\n"):
        m = gen.RECORD.match(line)
        if m and m.group(2) == "ERROR":
            counts[gen.utc_minute(m.group(1))] += 1
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
want = [f"{m} {n}" for m, n in top]
print(want, file=sys.stderr)
try:
    with open("/app/answer.txt", encoding="utf-8") as f:
        got = [ln.strip() for ln in f.read().strip().split("\n")]
except (OSError, UnicodeDecodeError):
    got = []
print(1 if got == want else 0)
