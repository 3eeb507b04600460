import sqlite3
from pathlib import Path


def test_answer():
    con = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
    name, total = con.execute(
        "SELECT c.name, SUM(o.amount_cents) t FROM orders o JOIN customers c ON c.id = o.customer_id "
        "GROUP BY c.id ORDER BY t DESC LIMIT 1"
    ).fetchone()
    assert Path("/app/answer.txt").read_text().split() == [name, str(total)]
