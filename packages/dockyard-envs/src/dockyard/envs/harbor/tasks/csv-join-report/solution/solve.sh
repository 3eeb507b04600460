#!/bin/bash
cd /app
python3 - <<'PY'
import csv
from decimal import ROUND_HALF_UP, Decimal

def rows(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))

country = {int(r["customer_id"]): r["country"].strip().upper() for r in rows("data/customers.csv")}
rate = {r["currency"].strip().upper(): Decimal(r["usd_per_unit"]) for r in rows("data/rates.csv")}
orders = {}
for r in rows("data/orders.csv"):
    orders[r["order_id"].strip()] = r          # the last row of an order id wins
agg = {}
for r in orders.values():
    if r["status"].strip().lower() != "paid":
        continue
    cid = int(r["customer_id"])
    a = agg.setdefault(country.get(cid, "UNKNOWN"), [set(), 0, Decimal(0)])
    a[0].add(cid)
    a[1] += 1
    a[2] += Decimal(r["amount"].strip()) * rate[r["currency"].strip().upper()]
out = sorted(((c, len(a[0]), a[1], a[2].quantize(Decimal("0.01"), ROUND_HALF_UP))
              for c, a in agg.items()), key=lambda x: (-x[3], x[0]))
with open("report.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["country", "customers", "orders", "revenue_usd"])
    w.writerows([c, n, k, f"{v:.2f}"] for c, n, k, v in out)
PY
