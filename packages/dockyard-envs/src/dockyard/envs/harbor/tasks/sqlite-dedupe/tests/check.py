"""check.py PRISTINE MERGED: the merge recomputed from a pristine rebuild. Reward: 0.5 for the
customers table exactly as expected, 0.5 for the orders table exactly as expected (0 for both
if the schema changed)."""

import sqlite3
import sys

pristine = sqlite3.connect(sys.argv[1])


def expected() -> tuple[list, list]:
    custs = pristine.execute("SELECT id, email, name, phone, created_at FROM customers").fetchall()
    groups: dict[str, list] = {}
    for c in custs:
        groups.setdefault(c[1].strip().lower(), []).append(c)
    keep, moved = [], {}
    for key, members in groups.items():
        members.sort(key=lambda c: (c[4], c[0]))
        if len(members) == 1:
            keep.append(members[0])
            continue
        s = members[0]
        name, phone = (
            next((m[i] for m in members if m[i] not in (None, "")), None) for i in (2, 3)
        )
        keep.append((s[0], key, name, phone, s[4]))
        for m in members[1:]:
            moved[m[0]] = s[0]
    orders = [
        (o, moved.get(c, c), a)
        for o, c, a in pristine.execute("SELECT id, customer_id, amount_cents FROM orders")
    ]
    return sorted(keep), sorted(orders)


def main() -> float:
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    try:
        db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
        if db.execute(schema).fetchall() != pristine.execute(schema).fetchall():
            print("schema changed", file=sys.stderr)
            return 0.0
        custs = sorted(db.execute("SELECT id, email, name, phone, created_at FROM customers"))
        orders = sorted(db.execute("SELECT id, customer_id, amount_cents FROM orders"))
    except sqlite3.Error as e:
        print(f"cannot read the database: {e}", file=sys.stderr)
        return 0.0
    want_c, want_o = expected()
    print(
        f"customers: {len(custs)} rows, want {len(want_c)}; "
        f"{len(set(want_c) ^ set(custs))} rows differ",
        file=sys.stderr,
    )
    print(f"orders: {len(set(want_o) ^ set(orders))} rows differ", file=sys.stderr)
    return 0.5 * (custs == want_c) + 0.5 * (orders == want_o)


print(main())
