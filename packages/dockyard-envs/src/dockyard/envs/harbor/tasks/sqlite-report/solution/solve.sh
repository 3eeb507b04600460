#!/bin/bash
cd /app
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("shop.db")
name, total = db.execute(
    "SELECT c.name, SUM(o.amount) FROM orders o JOIN customers c ON c.id = o.customer_id "
    "GROUP BY c.id ORDER BY 2 DESC LIMIT 1").fetchone()
open("answer.txt", "w").write(f"{name},{total:.2f}\n")
PY
