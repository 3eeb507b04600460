"""Build the app database (schema version 1). Deterministic: the verifier rebuilds the same
pristine copy to compare against."""

import random
import sqlite3
import sys

rng = random.Random(2309)
db = sqlite3.connect(sys.argv[1])
db.executescript(
    """
    PRAGMA user_version = 1;
    CREATE TABLE users (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        email TEXT NOT NULL UNIQUE,
        signup_at TEXT NOT NULL
    );
    CREATE TABLE orders (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL,
        placed_at TEXT NOT NULL,
        status TEXT NOT NULL,
        total_cents INTEGER NOT NULL
    );
    CREATE INDEX idx_orders_status ON orders(status);
    """
)
first = ["ana", "ben", "cleo", "dev", "eli", "fay", "gus", "hana", "ivo", "jun", "kai", "lea"]
users = []
for uid in range(1, 121):
    name = f"{rng.choice(first).title()} {chr(65 + rng.randrange(26))}."
    users.append(
        (
            uid,
            name,
            f"user{uid}@example.org",
            f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00",
        )
    )
db.executemany("INSERT INTO users VALUES (?, ?, ?, ?)", users)
orders = []
statuses = ["paid"] * 6 + ["shipped"] * 3 + ["cancelled", "refunded"]
for oid in range(1, 1501):
    uid = rng.randint(1, 130)  # ids 121..130: orders of deleted users (no users row)
    if uid % 9 == 0:
        continue  # some users never ordered
    placed = (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    )
    orders.append((oid, uid, placed, rng.choice(statuses), rng.randint(199, 49999)))
# a few users whose every order is cancelled
for uid in (10, 20, 30):
    orders = [o for o in orders if o[1] != uid]
    orders.append((2000 + uid, uid, "2024-06-01 10:00:00", "cancelled", 1000))
db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", orders)
db.commit()
