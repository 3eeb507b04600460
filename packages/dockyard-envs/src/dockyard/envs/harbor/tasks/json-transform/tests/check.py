"""Recompute the flat rows from the pristine catalog (tests/gen.py); compare /app/products.jsonl
line by line as parsed JSON (key order and escaping free; integers must be integers)."""

import json
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

want = gen.flatten(json.loads(gen.build()["data/catalog.json"]))
print(len(want), "rows expected", file=sys.stderr)


def same(g, w) -> bool:
    if isinstance(w, bool) or isinstance(g, bool) or type(g) is not type(w):
        return g is w if isinstance(w, bool) else False
    if isinstance(w, dict):
        return g.keys() == w.keys() and all(same(g[k], w[k]) for k in w)
    if isinstance(w, list):
        return len(g) == len(w) and all(same(a, b) for a, b in zip(g, w, strict=False))
    return g == w


try:
    with open("/app/products.jsonl", encoding="utf-8") as f:
        got = [json.loads(line) for line in f if line.strip()]
except (OSError, ValueError):
    got = []
bad = [i for i, (g, w) in enumerate(zip(got, want, strict=False)) if not same(g, w)]
print("first mismatching rows:", bad[:5], file=sys.stderr)
print(1 if len(got) == len(want) and not bad else 0)
