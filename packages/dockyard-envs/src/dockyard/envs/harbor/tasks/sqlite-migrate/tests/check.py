"""check.py PRISTINE MIGRATED: the migration's results recomputed from a pristine rebuild.

Gate (else 0): every original table, row and value, the old index and constraints intact.
Then one point each (reward = points / 6): order_count, last_order_at, lifetime_cents values;
defaults of the new columns on insert; the new index; user_version = 2."""

import sqlite3
import sys

pristine = sqlite3.connect(sys.argv[1])
try:
    db = sqlite3.connect(f"file:{sys.argv[2]}?mode=rw", uri=True)
    db.execute("SELECT 1 FROM users LIMIT 1")
except sqlite3.Error as e:
    print(f"cannot open the database: {e}", file=sys.stderr)
    print(0)
    sys.exit(0)


def log(msg: str) -> None:
    print(msg, file=sys.stderr)


def gate() -> bool:
    for table, cols in (
        ("users", "id, name, email, signup_at"),
        ("orders", "id, user_id, placed_at, status, total_cents"),
    ):
        q = f"SELECT {cols} FROM {table} ORDER BY id"
        try:
            if db.execute(q).fetchall() != pristine.execute(q).fetchall():
                log(f"{table}: rows changed")
                return False
        except sqlite3.Error as e:
            log(f"{table}: {e}")
            return False
    idx = db.execute("SELECT sql FROM sqlite_master WHERE name = 'idx_orders_status'").fetchone()
    if not idx or "status" not in idx[0]:
        log("idx_orders_status is gone")
        return False
    info = {r[1]: r for r in db.execute("PRAGMA table_info(users)")}
    if not (info.get("email") and info["email"][3] == 1 and info["name"][3] == 1):
        log("users lost a NOT NULL constraint")
        return False
    try:  # email stays UNIQUE (rolled back below)
        db.execute("SAVEPOINT u")
        db.execute(
            "INSERT INTO users (id, name, email, signup_at) VALUES (9001, 'x', 'user1@example.org', 'x')"
        )
        log("users.email is no longer UNIQUE")
        return False
    except sqlite3.IntegrityError:
        pass
    finally:
        db.execute("ROLLBACK TO u")
        db.execute("RELEASE u")
    return True


def expected() -> dict[int, tuple]:
    out = {}
    for (uid,) in pristine.execute("SELECT id FROM users"):
        rows = pristine.execute(
            "SELECT placed_at, status, total_cents FROM orders WHERE user_id = ?", (uid,)
        ).fetchall()
        live = [r for r in rows if r[1] != "cancelled"]
        out[uid] = (
            len(live),
            max((r[0] for r in live), default=None),
            sum(r[2] for r in rows if r[1] in ("paid", "shipped")),
        )
    return out


def main() -> float:
    if not gate():
        return 0.0
    want = expected()
    points = 0
    for i, col in enumerate(("order_count", "last_order_at", "lifetime_cents")):
        try:
            got = dict(db.execute(f"SELECT id, {col} FROM users"))
        except sqlite3.Error as e:
            log(f"{col}: {e}")
            continue
        bad = [u for u in want if got.get(u, "missing") != want[u][i]]
        log(f"{col}: {len(bad)} wrong (e.g. {bad[:5]})")
        points += not bad
    try:
        db.execute("SAVEPOINT d")
        db.execute(
            "INSERT INTO users (id, name, email, signup_at) VALUES (9002, 'n', 'n@x', 'now')"
        )
        r = db.execute(
            "SELECT order_count, last_order_at, lifetime_cents FROM users WHERE id = 9002"
        ).fetchone()
        db.execute("ROLLBACK TO d")
        db.execute("RELEASE d")
        log(f"defaults: {r}")
        points += r == (0, None, 0) and all(
            c[3] == 1
            for c in db.execute("PRAGMA table_info(users)")
            if c[1] in ("order_count", "lifetime_cents")
        )
    except sqlite3.Error as e:
        log(f"defaults: {e}")
    cols = [r[2] for r in db.execute("PRAGMA index_info('idx_orders_user_placed')")]
    on = db.execute(
        "SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = 'idx_orders_user_placed'"
    ).fetchone()
    log(f"index: {on} {cols}")
    points += on == ("orders",) and cols == ["user_id", "placed_at"]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    log(f"user_version: {version}")
    points += version == 2
    return points / 6


print(main())
