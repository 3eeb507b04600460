"""Recompute the per-country report from pristine CSVs (tests/gen.py); compare /app/report.csv.

Exact match on header, row order, countries and counts; revenue must be written with exactly two
decimals and be within 0.01 of the exact (decimal, half-up) total, so a float sum is accepted."""

import csv
import re
import sys
from decimal import Decimal

sys.dont_write_bytecode = True
sys.path.insert(0, "/tests")
import gen  # noqa: E402

want = gen.report(gen.build())
print(want, file=sys.stderr)
try:
    with open("/app/report.csv", encoding="utf-8", newline="") as f:
        got = [r for r in csv.reader(f) if r]
except (OSError, UnicodeDecodeError, csv.Error):
    got = []
ok = len(got) == len(want) and got[0] == want[0]
for g, w in zip(got[1:], want[1:], strict=False):
    ok = ok and len(g) == 4 and g[:3] == w[:3] and re.fullmatch(r"-?\d+\.\d\d", g[3]) is not None
    ok = ok and abs(Decimal(g[3]) - Decimal(w[3])) <= Decimal("0.01")
print(1 if ok else 0)
