#!/bin/bash
cd /app
want=$(sqlite3 shop.db "SELECT c.name || ',' || printf('%.2f', SUM(o.amount)) FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.id ORDER BY SUM(o.amount) DESC LIMIT 1;")
got=$(tr -d ' \n' < answer.txt 2>/dev/null)
if [ -n "$want" ] && [ "$got" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
