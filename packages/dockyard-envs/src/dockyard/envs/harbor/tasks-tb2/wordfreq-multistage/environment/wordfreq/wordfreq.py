import collections
import re
import sys


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        words = re.findall(r"[a-z]+", f.read().lower())
    counts = collections.Counter(w for w in words if len(w) > 3)
    for word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]:
        print(f"{count:6d} {word}")
