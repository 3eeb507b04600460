"""Generate /app/data/catalog.json (deterministic): stores with arbitrarily nested departments,
products with messy SKUs/titles/tags, prices as numbers, strings (some with thousands
separators) or null, variants with or without stock, discontinued products."""

import json
import random
import re
from decimal import Decimal

WORDS = [
    "Chef's",
    "knife",
    "Crème",
    "brûlée",
    "torch",
    "Küchen",
    "pan",
    "steel",
    "cast-iron",
    "skillet",
    "bamboo",
    "board",
    "Ærø",
    "mug",
    "tea",
    "kettle",
    "glass",
    "jar",
    "spice",
    "rack",
    "whisk",
    "zester",
    "Señor",
    "grill",
]
TAGS = ["Steel", "steel ", " sharp", "Gift", "gift", "SALE", "new", "Eco", " eco ", "kitchen"]
DEPTS = [
    "Kitchen",
    "Knives",
    "Cookware",
    "Tea & Coffee",
    "Outdoor",
    "Grills",
    "Storage",
    "Jars",
    "Gifts",
    "Ceramics",
    "Bar",
]


def _product(rng: random.Random, n: int) -> dict:
    title = "".join(
        rng.choice([" ", "  ", "\t", " \n "]) + rng.choice(WORDS) for _ in range(rng.randint(2, 5))
    ) + rng.choice(["", " ", "  "])
    p: dict = {
        "sku": rng.choice(["", " ", "  "])
        + f"{rng.choice('abcxyz')}{rng.choice('kq')}-{n:04d}"
        + rng.choice(["", " "]),
        "title": title,
    }
    cents = rng.randint(99, 250000)
    cur = rng.choice(["EUR", "eur", "USD", "GBP"])
    amount = Decimal(cents) / 100
    kind = rng.randint(0, 9)
    if kind < 4:
        p["price"] = {"amount": float(amount), "currency": cur}
    elif kind < 8:
        s = f"{amount:,.2f}" if amount >= 1000 and rng.random() < 0.7 else str(amount)
        p["price"] = {"amount": s, "currency": cur}
    elif kind == 8:
        p["price"] = None
    if rng.random() < 0.8:
        p["tags"] = rng.sample(TAGS, rng.randint(0, 4))
    if rng.random() < 0.85:
        p["variants"] = [
            {"size": s} | ({"stock": rng.randint(0, 40)} if rng.random() < 0.8 else {})
            for s in rng.sample(["S", "M", "L", "XL"], rng.randint(1, 4))
        ]
    if rng.random() < 0.12:
        p["discontinued"] = True
    elif rng.random() < 0.1:
        p["discontinued"] = False
    return p


def _dept(rng: random.Random, depth: int, counter: list[int]) -> dict:
    d: dict = {"name": rng.choice(DEPTS), "products": []}
    for _ in range(rng.randint(0 if depth else 1, 6)):
        counter[0] += 1
        d["products"].append(_product(rng, counter[0]))
    if depth < 3 and rng.random() < 0.6:
        d["children"] = [_dept(rng, depth + 1, counter) for _ in range(rng.randint(1, 3))]
    return d


def build() -> dict[str, bytes]:
    rng = random.Random(4242)
    counter = [0]
    doc = {
        "generated": "2024-05-01T12:00:00Z",
        "stores": [
            {
                "id": f"store-{i:02d}",
                "name": f"Shop {i}",
                "departments": [_dept(rng, 0, counter) for _ in range(rng.randint(2, 4))],
            }
            for i in range(1, 6)
        ],
    }
    return {"data/catalog.json": json.dumps(doc, indent=2, ensure_ascii=False).encode()}


def flatten(doc: dict) -> list[dict]:
    """The expected rows, in document order."""
    out = []

    def walk(store: str, dept: dict, path: list[str]) -> None:
        path = [*path, dept["name"]]
        for p in dept.get("products", []):
            if p.get("discontinued") is True:
                continue
            price = p.get("price")
            cents = cur = None
            if price is not None:
                cents = int(Decimal(str(price["amount"]).replace(",", "")) * 100)
                cur = price["currency"].upper()
            out.append(
                {
                    "store": store,
                    "path": " > ".join(path),
                    "sku": p["sku"].strip().upper(),
                    "title": re.sub(r"\s+", " ", p["title"]).strip(),
                    "price_cents": cents,
                    "currency": cur,
                    "tags": sorted({t.strip().lower() for t in p.get("tags", [])}),
                    "stock": sum(v.get("stock", 0) for v in p.get("variants", [])),
                }
            )
        for child in dept.get("children", []):
            walk(store, child, path)

    for s in doc["stores"]:
        for d in s["departments"]:
            walk(s["id"], d, [])
    return out


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
