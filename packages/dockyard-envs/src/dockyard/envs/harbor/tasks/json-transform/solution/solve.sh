#!/bin/bash
cd /app
python3 - <<'PY'
import json, re
from decimal import Decimal

doc = json.load(open("data/catalog.json", encoding="utf-8"))
out = open("products.jsonl", "w", encoding="utf-8")

def walk(store, dept, path):
    path = path + [dept["name"]]
    for p in dept.get("products", []):
        if p.get("discontinued") is True:
            continue
        price = p.get("price")
        cents = int(Decimal(str(price["amount"]).replace(",", "")) * 100) if price else None
        row = {"store": store, "path": " > ".join(path), "sku": p["sku"].strip().upper(),
               "title": " ".join(p["title"].split()), "price_cents": cents,
               "currency": price["currency"].upper() if price else None,
               "tags": sorted({t.strip().lower() for t in p.get("tags", [])}),
               "stock": sum(v.get("stock", 0) for v in p.get("variants", []))}
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
    for child in dept.get("children", []):
        walk(store, child, path)

for s in doc["stores"]:
    for d in s["departments"]:
        walk(s["id"], d, [])
PY
