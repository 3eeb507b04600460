#!/bin/bash
set -euo pipefail
sqlite3 -separator $'\n' /app/shop.db "SELECT c.name, SUM(o.amount_cents) AS t FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.id ORDER BY t DESC LIMIT 1" > /app/answer.txt
