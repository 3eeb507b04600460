import collections
import re

with open("/app/book.txt") as f:
    text = f.read().lower()
counts = collections.Counter(re.findall(r"[a-z]+", text))
want = [f"{c} {w}" for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:5]]
try:
    with open("/app/top.txt") as f:
        got = [line.strip() for line in f.read().strip().splitlines()]
except OSError:
    got = []
print(1 if got == want else 0)
