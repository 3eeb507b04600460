"""Generate /app/data/{customers,orders,rates}.csv (deterministic): RFC 4180 quoting, a BOM,
CRLF endings, padded/lower-case codes, zero-padded ids, re-exported (duplicate) orders and
orders whose customer is unknown."""

import csv
import io
import random
from decimal import ROUND_HALF_UP, Decimal

COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "ES", "NL", "SE"]
RATES = {
    "USD": "1",
    "EUR": "1.0843",
    "GBP": "1.2671",
    "JPY": "0.006712",
    "BRL": "0.2015",
    "INR": "0.01204",
    "SEK": "0.09531",
}
FIRST = ["Anna", "Jürgen", "Zoë", "Renée", "John", "Siobhan", "Mei", "Rahul", "Ana", "Lars"]
LAST = [
    "Müller",
    "O'Brien",
    "Smith, Jr.",
    'Nakamura "Ken"',
    "Dubois",
    "Silva",
    "Patel",
    "García",
    "de Vries",
    "Lindqvist",
]


def _csv(rows: list[list[str]], crlf: bool) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n" if crlf else "\n").writerows(rows)
    return buf.getvalue()


def build() -> dict[str, bytes]:
    rng = random.Random(77)
    customers = [["customer_id", "name", "country", "signup_date"]]
    country_of = {}
    for cid in range(1, 161):
        c = rng.choice(COUNTRIES)
        country_of[cid] = c
        shown = rng.choice([c, c, c, c.lower(), f" {c}", f"{c} ", c.title()])
        customers.append(
            [
                str(cid),
                f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                shown,
                f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            ]
        )
    orders = [["order_id", "customer_id", "order_date", "amount", "currency", "status"]]
    for oid in range(1000, 2600):
        cid = rng.randint(1, 175)  # 161..175 do not exist
        shown_id = rng.choice([str(cid)] * 5 + [f"{cid:05d}"])
        cur = rng.choice(list(RATES))
        amount = Decimal(rng.randint(100, 2500000 if cur == "JPY" else 50000)) / 100
        amount_s = rng.choice([str(amount)] * 6 + [f" {amount}", f"{amount} "])
        status = rng.choice(["paid"] * 6 + ["PAID", " Paid", "refunded", "pending", "cancelled"])
        row = [
            str(oid),
            shown_id,
            f"2024-{rng.randint(1, 6):02d}-{rng.randint(1, 28):02d}",
            amount_s,
            rng.choice([cur] * 5 + [cur.lower()]),
            status,
        ]
        if rng.random() < 0.05:  # re-exported later with a changed status: the last row wins
            orders.append(list(row))
            row[5] = rng.choice(["refunded", "paid", "cancelled"])
        orders.append(row)
    head, body = orders[0], orders[1:]
    rng.shuffle(body)  # later duplicates may now come first; "last row in the file" still wins
    rates = [["currency", "usd_per_unit"]] + [[k, v] for k, v in RATES.items()]
    return {
        "data/customers.csv": ("\ufeff" + _csv(customers, crlf=True)).encode(),
        "data/orders.csv": _csv([head, *body], crlf=False).encode(),
        "data/rates.csv": _csv(rates, crlf=False).encode(),
    }


def report(files: dict[str, bytes]) -> list[list[str]]:
    """The expected report rows (header first), computed with exact decimals."""

    def rows(name):
        return list(csv.DictReader(io.StringIO(files[name].decode("utf-8-sig"), newline="")))

    country = {
        int(r["customer_id"]): r["country"].strip().upper() for r in rows("data/customers.csv")
    }
    rate = {
        r["currency"].strip().upper(): Decimal(r["usd_per_unit"]) for r in rows("data/rates.csv")
    }
    last = {}
    for r in rows("data/orders.csv"):
        last[r["order_id"].strip()] = r
    agg: dict[str, list] = {}
    for r in last.values():
        if r["status"].strip().lower() != "paid":
            continue
        cid = int(r["customer_id"])
        a = agg.setdefault(country.get(cid, "UNKNOWN"), [set(), 0, Decimal(0)])
        a[0].add(cid)
        a[1] += 1
        a[2] += Decimal(r["amount"].strip()) * rate[r["currency"].strip().upper()]
    out = [
        (c, len(a[0]), a[1], a[2].quantize(Decimal("0.01"), ROUND_HALF_UP)) for c, a in agg.items()
    ]
    out.sort(key=lambda x: (-x[3], x[0]))
    return [["country", "customers", "orders", "revenue_usd"]] + [
        [c, str(n), str(k), f"{v:.2f}"] for c, n, k, v in out
    ]


if __name__ == "__main__":
    import os

    for name, data in build().items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            f.write(data)
