#!/bin/bash
cd /app
python3 - <<'PY'
import csv, re

with open("data/inventory.csv", encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
n = len(rows[0])
cells = [[re.sub(r"\r\n|\r|\n", "<br>", c.strip()).replace("|", r"\|") for c in (r + [""] * n)[:n]]
         for r in rows]
num = re.compile(r"-?\d+(\.\d+)?")
right = []
for j in range(n):
    vals = [r[j] for r in cells[1:] if r[j]]
    right.append(bool(vals) and all(num.fullmatch(v) for v in vals))
width = [max(3, max(len(r[j]) for r in cells)) for j in range(n)]
fmt = lambda r: "| " + " | ".join(c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(r, width, right)) + " |"
sep = "| " + " | ".join("-" * (w - 1) + ":" if rt else "-" * w for w, rt in zip(width, right)) + " |"
with open("table.md", "w", encoding="utf-8") as out:
    out.write("\n".join([fmt(cells[0]), sep] + [fmt(r) for r in cells[1:]]) + "\n")
PY
