"""Build crm.db with duplicate customers. Deterministic: the verifier rebuilds the same pristine
copy to recompute the expected result."""

import random
import sqlite3
import sys

rng = random.Random(4711)
db = sqlite3.connect(sys.argv[1])
db.executescript(
    """
    CREATE TABLE customers (
        id INTEGER PRIMARY KEY,
        email TEXT NOT NULL,
        name TEXT,
        phone TEXT,
        created_at TEXT NOT NULL
    );
    CREATE TABLE orders (
        id INTEGER PRIMARY KEY,
        customer_id INTEGER NOT NULL REFERENCES customers(id),
        amount_cents INTEGER NOT NULL
    );
    """
)
first = ["Ada", "Bo", "Cyd", "Dee", "Ezra", "Fin", "Gia", "Hal", "Iris", "Jo", "Kit", "Lu"]
people = []
for i in range(70):
    people.append(
        (
            f"{rng.choice(first).lower()}{i}@{rng.choice(['mail.com', 'corp.io', 'web.de'])}",
            f"{rng.choice(first)} {chr(65 + i % 26)}{i}",
        )
    )
rows = []
for email, name in people:
    copies = rng.choice([1, 1, 1, 2, 2, 3, 4])
    for _ in range(copies):
        variant = rng.choice([email, email.upper(), f"  {email}", f"{email} ", email.title()])
        nm = rng.choice([name, name, None, "", name.upper()])
        phone = rng.choice([None, None, "", f"+49 30 {rng.randint(1000000, 9999999)}"])
        created = (
            f"20{rng.randint(19, 24)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00"
        )
        rows.append((variant, nm, phone, created))
# two duplicates created at the very same instant (tie broken by smaller id)
rows.append((people[0][0].upper(), "Tie Later", None, "2018-01-01 00:00:00"))
rows.append((people[0][0], None, "+49 30 1111111", "2018-01-01 00:00:00"))
rng.shuffle(rows)
ids = rng.sample(range(1, 1000), len(rows))
db.executemany(
    "INSERT INTO customers VALUES (?, ?, ?, ?, ?)",
    [(cid, *r) for cid, r in zip(ids, rows, strict=True)],
)
orders = [(oid, rng.choice(ids), rng.randint(100, 90000)) for oid in range(1, 601)]
db.executemany("INSERT INTO orders VALUES (?, ?, ?)", orders)
db.commit()
